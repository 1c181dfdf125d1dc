import { drizzle, type NodePgDatabase } from "drizzle-orm/node-postgres";
import type pg from "pg";
import type * as schema from "./schema.ts";

type PgDb = NodePgDatabase<typeof schema>;

/**
 * `transaction` for a drizzle database on `pool` that always gives its connection back.
 *
 * drizzle-orm 0.45's own pooled `transaction()` sends BEGIN before the try/finally that
 * releases its client (drizzle-orm issue #6241, open). A BEGIN that fails, as it does on a
 * connection the server ended while it sat idle in the pool (a PostgreSQL restart), leaves
 * that client checked out for the life of the process. In a chaos run a few of those left a
 * replica with none of its pool's connections: every request, heartbeat and claim then
 * waited for one and failed.
 *
 * Here the client is checked out and released around drizzle's transaction on that one
 * client (which does not release it itself). The pool drops a released client whose
 * connection ended. Each client's drizzle instance is made once.
 */
export function poolTransactions(pool: pg.Pool, drizzleSchema: typeof schema): PgDb["transaction"] {
  const onClient = new WeakMap<pg.PoolClient, PgDb>();
  return async (fn, config) => {
    const client = await pool.connect();
    let db = onClient.get(client);
    if (!db) {
      db = drizzle(client, { schema: drizzleSchema });
      onClient.set(client, db);
    }
    try {
      return await db.transaction(fn, config);
    } finally {
      client.release();
    }
  };
}
