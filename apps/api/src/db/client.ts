import { randomUUID } from "node:crypto";
import { chmodSync, mkdirSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { PGlite } from "@electric-sql/pglite";
import { drizzle as drizzlePg } from "drizzle-orm/node-postgres";
import { migrate as migratePg } from "drizzle-orm/node-postgres/migrator";
import type { PgDatabase, PgQueryResultHKT } from "drizzle-orm/pg-core";
import { drizzle as drizzlePglite } from "drizzle-orm/pglite";
import { migrate as migratePglite } from "drizzle-orm/pglite/migrator";
import pg from "pg";
import type { Logger } from "pino";
import { advisoryTasks, type ExclusiveTasks, processTasks } from "./exclusive.ts";
import { poolTransactions } from "./pool-transactions.ts";
import * as schema from "./schema.ts";

export type Db = PgDatabase<PgQueryResultHKT, typeof schema>;

export interface Database {
  db: Db;
  kind: "pglite" | "postgres";
  /**
   * This process's name on PostgreSQL (every pooled connection's application_name): the
   * database signs the bus notes of this process's writes with it (drizzle/0024_bus_notes.sql),
   * and the bus skips the notes it signed (realtime/pg-bus.ts).
   */
  applicationName: string;
  /**
   * The lane for the one statement that hands pending jobs to an agent (services/jobs.ts):
   * on PostgreSQL a pool of its own, so a claim woken by a create never queues behind users'
   * queries for one of the main pool's connections. PGlite's is `db`.
   */
  claimDb: Db;
  /** Work that runs on one replica at a time. */
  tasks: ExclusiveTasks;
  close(): Promise<void>;
}

/**
 * Connections of the claim lane. A claim is one short statement (a few ms), so two serve
 * claims of many agents at once; they add two connections per replica to PostgreSQL's count.
 */
const CLAIM_LANE_SIZE = 2;

/** Advisory-lock class of migrations (the other locks: db/exclusive.ts). */
const MIGRATION_LOCK = 0x646f71;

const MIGRATIONS = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../drizzle");

/**
 * Opens PostgreSQL at `databaseUrl`, or embedded PGlite with its data directory in
 * `dataDir`, and applies the committed migrations.
 */
export async function openDatabase(opts: {
  databaseUrl?: string;
  dataDir: string;
  log: Pick<Logger, "warn">;
  /** How long a new connection may take before the attempt fails (default 10 s). */
  connectTimeoutMs?: number;
  /** PostgreSQL connections at most (ApiConfig.databasePoolSize). */
  poolSize: number;
}): Promise<Database> {
  const applicationName = `doppio-api ${randomUUID()}`;
  if (opts.databaseUrl) {
    // A connection attempt that never completes (a server mid-restart, a dead network path)
    // fails after the timeout instead of holding one of the pool's slots, and the requests
    // queued behind it, forever.
    const connection = {
      connectionString: opts.databaseUrl,
      application_name: applicationName,
      connectionTimeoutMillis: opts.connectTimeoutMs ?? 10_000,
    };
    const pool = watchedPool(new pg.Pool({ ...connection, max: opts.poolSize }), opts.log);
    const claimPool = watchedPool(new pg.Pool({ ...connection, max: CLAIM_LANE_SIZE }), opts.log);
    const db = drizzlePg(pool, { schema });
    db.transaction = poolTransactions(pool, schema);
    // Replicas starting together: one migrates, the others wait for it and find nothing to do.
    try {
      const lock = await pool.connect();
      try {
        await lock.query("select pg_advisory_lock($1, 0)", [MIGRATION_LOCK]);
        await migratePg(db, { migrationsFolder: MIGRATIONS });
      } finally {
        await lock.query("select pg_advisory_unlock($1, 0)", [MIGRATION_LOCK]).catch(() => {});
        lock.release();
      }
    } catch (err) {
      await pool.end().catch(() => {});
      await claimPool.end().catch(() => {});
      throw err;
    }
    // The lock connection idles between ticks: keep-alive finds a dead path, and a lock query
    // that hangs fails after 10 s instead of holding its task on this replica for ever.
    const tasks = advisoryTasks(
      () => new pg.Client({ ...connection, keepAlive: true, query_timeout: 10_000 }),
      opts.log,
    );
    return {
      db: db as unknown as Db,
      claimDb: drizzlePg(claimPool, { schema }) as unknown as Db,
      kind: "postgres",
      applicationName,
      tasks,
      close: async () => {
        await tasks.close();
        await claimPool.end();
        await pool.end();
      },
    };
  }
  const dir = path.join(opts.dataDir, "pgdata");
  // PGlite makes its files 0666: the directory keeps every other user (and every box's VMM,
  // on a single-host install) out of the database.
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  chmodSync(dir, 0o700);
  const client = await PGlite.create(dir);
  const db = drizzlePglite(client, { schema });
  await migratePglite(db, { migrationsFolder: MIGRATIONS });
  return {
    db: db as unknown as Db,
    claimDb: db as unknown as Db,
    kind: "pglite",
    applicationName,
    tasks: processTasks(),
    close: () => client.close(),
  };
}

/**
 * `pool` with its connections' errors logged: an idle connection the server ended (a restart,
 * a failover) is dropped by the pool and replaced on next use, and one ended while checked
 * out between two queries (a transaction's, a held client's) fails its holder's next query
 * and is dropped at release. Without these listeners either error would end the process.
 */
function watchedPool(pool: pg.Pool, log: Pick<Logger, "warn">): pg.Pool {
  pool.on("error", (err) => log.warn({ err }, "an idle database connection was closed"));
  pool.on("connect", (client) => {
    client.on("error", (err) => log.warn({ err }, "a database connection in use was closed"));
  });
  return pool;
}
