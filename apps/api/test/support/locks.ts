import { sql } from "drizzle-orm";
import type { Db } from "../../src/db/client.ts";

/** Transactions of this database waiting for an advisory lock right now (PostgreSQL). */
export async function advisoryLockWaiters(db: Db): Promise<number> {
  const answer = await db.execute(sql`select count(*)::int as n from pg_locks
    where locktype = 'advisory' and not granted
      and database = (select oid from pg_database where datname = current_database())`);
  return (answer as unknown as { rows: Array<{ n: number }> }).rows[0]!.n;
}
