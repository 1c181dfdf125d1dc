import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import pg from "pg";
import { pino } from "pino";
import { buildControlPlane, type ControlPlane } from "../../src/app.ts";
import { ApiConfig } from "../../src/config.ts";
import { openDatabase } from "../../src/db/client.ts";

export type DbKind = "pglite" | "postgres";

/** Postgres for the shared suite: CI's `scripts/test.sh` starts a cluster and sets this. */
export const POSTGRES_URL = process.env.TEST_DATABASE_URL;

export const DB_KINDS: DbKind[] = ["pglite", "postgres"];

/** Why a database kind cannot run here, or null when it can. */
export function dbUnavailable(kind: DbKind): string | null {
  if (kind === "postgres" && !POSTGRES_URL) {
    return "TEST_DATABASE_URL is not set (make test starts PostgreSQL and sets it)";
  }
  return null;
}

export interface TestControlPlane {
  cp: ControlPlane;
  url: string;
  kind: DbKind;
  close(): Promise<void>;
}

/**
 * A real control plane on a random loopback port, on a fresh PGlite data directory or a
 * fresh PostgreSQL database created for this instance and dropped afterwards.
 */
export async function startControlPlane(
  opts: { kind?: DbKind; config?: Partial<ApiConfig> } = {},
): Promise<TestControlPlane> {
  const kind = opts.kind ?? "pglite";
  const dataDir = await mkdtemp(path.join(tmpdir(), "doppio-cp-"));
  let databaseUrl: string | undefined;
  let dropDatabase = async () => {};
  if (kind === "postgres") {
    if (!POSTGRES_URL) throw new Error(dbUnavailable("postgres")!);
    const name = `doppio_test_${process.pid}_${Math.random().toString(36).slice(2, 10)}`;
    const admin = new pg.Client({ connectionString: POSTGRES_URL });
    await admin.connect();
    await admin.query(`CREATE DATABASE ${name}`);
    await admin.end();
    const url = new URL(POSTGRES_URL);
    url.pathname = `/${name}`;
    databaseUrl = url.toString();
    dropDatabase = async () => {
      const c = new pg.Client({ connectionString: POSTGRES_URL });
      await c.connect();
      await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await c.end();
    };
  }
  const config = ApiConfig.parse({
    port: 0,
    dataDir,
    databaseUrl,
    logLevel: process.env.DOPPIO_TEST_LOG ?? "silent",
    reaperIntervalMs: 60_000,
    ...opts.config,
  });
  const database = await openDatabase({ databaseUrl: config.databaseUrl, dataDir: config.dataDir });
  const cp = await buildControlPlane({ config, database, logger: pino({ level: config.logLevel }) });
  const address = await cp.app.listen({ host: "127.0.0.1", port: 0 });
  return {
    cp,
    url: address,
    kind,
    async close() {
      await cp.close();
      await database.close();
      await dropDatabase();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}
