import { type SQL, sql } from "drizzle-orm";
import type { AnyPgColumn } from "drizzle-orm/pg-core";

/**
 * In a multi-row `insert … on conflict do update`, the value the conflicting row proposed
 * for `column` (PostgreSQL's `excluded` row), so one statement upserts every row its own way.
 */
export const excluded = (column: AnyPgColumn): SQL => sql`excluded.${sql.identifier(column.name)}`;
