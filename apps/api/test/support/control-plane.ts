import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import pg from "pg";
import type { DestinationStream } from "pino";
import { buildControlPlane, type ControlPlane } from "../../src/app.ts";
import { ApiConfig } from "../../src/config.ts";
import type { Clock } from "../../src/context.ts";
import { openDatabase } from "../../src/db/client.ts";
import { createLogger } from "../../src/logger.ts";
import { TestClient } from "./client.ts";
import { freePort } from "./ports.ts";

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
  /** A client signed in as the configured administrator (ADMIN_EMAIL). */
  admin(): Promise<TestClient>;
  close(): Promise<void>;
}

/** Every test control plane is configured with this administrator, as `make up` configures its own. */
export const ADMIN_EMAIL = "admin@doppio.test";
export const ADMIN_PASSWORD = "the operator's own passphrase";

/** A client signed in as the configured administrator of the control plane at `url`. */
export async function signedInAdmin(url: string): Promise<TestClient> {
  const client = new TestClient(url);
  const res = await client.post("/api/v1/auth/login", { email: ADMIN_EMAIL, password: ADMIN_PASSWORD });
  if (res.status !== 200) throw new Error(`admin login failed: ${res.status} ${JSON.stringify(res.body)}`);
  return client;
}

/** A new, empty PostgreSQL database on TEST_DATABASE_URL's server, and how to drop it. */
export async function freshPostgresDatabase(): Promise<{ url: string; drop(): Promise<void> }> {
  if (!POSTGRES_URL) throw new Error(dbUnavailable("postgres")!);
  const name = `doppio_test_${process.pid}_${Math.random().toString(36).slice(2, 10)}`;
  const admin = new pg.Client({ connectionString: POSTGRES_URL });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const url = new URL(POSTGRES_URL);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    async drop() {
      const c = new pg.Client({ connectionString: POSTGRES_URL });
      await c.connect();
      await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await c.end();
    },
  };
}

/**
 * A real control plane on a random loopback port, on a fresh PGlite data directory or a
 * fresh PostgreSQL database created for this instance and dropped afterwards.
 */
export async function startControlPlane(
  opts: {
    kind?: DbKind;
    config?: Partial<ApiConfig>;
    /** An existing data directory (a restart, PGlite); kept at close. */
    dataDir?: string;
    /** Where the control plane's log lines go (default: stdout, at the config's level). */
    logTo?: DestinationStream;
    /** An existing PostgreSQL database (another replica's); kept at close. */
    databaseUrl?: string;
    /** The control plane's clock (default: the system's). */
    clock?: Clock;
  } = {},
): Promise<TestControlPlane> {
  const kind = opts.kind ?? "pglite";
  const dataDir = opts.dataDir ?? (await mkdtemp(path.join(tmpdir(), "doppio-cp-")));
  let databaseUrl: string | undefined;
  let dropDatabase = async () => {};
  if (opts.databaseUrl) databaseUrl = opts.databaseUrl;
  else if (kind === "postgres") ({ url: databaseUrl, drop: dropDatabase } = await freshPostgresDatabase());
  const port = await freePort();
  const adminPasswordFile = path.join(dataDir, "admin-password");
  await writeFile(adminPasswordFile, `${ADMIN_PASSWORD}\n`, { mode: 0o600 });
  const config = ApiConfig.parse({
    port,
    publicUrl: `http://127.0.0.1:${port}`,
    dataDir,
    databaseUrl,
    logLevel: process.env.DOPPIO_TEST_LOG ?? "silent",
    reaperIntervalMs: 60_000,
    adminEmail: ADMIN_EMAIL,
    adminPasswordFile,
    // The suite's cheaper password hashing (vitest.config.ts), as spawned control planes read it.
    passwordScryptN: process.env.DOPPIO_PASSWORD_SCRYPT_N,
    ...opts.config,
  });
  const logger = createLogger(config.logLevel, opts.logTo);
  const database = await openDatabase({
    databaseUrl: config.databaseUrl,
    dataDir: config.dataDir,
    poolSize: config.databasePoolSize,
    log: logger,
  });
  let cp: ControlPlane;
  try {
    cp = await buildControlPlane({
      config,
      database,
      logger,
      ...(opts.clock ? { clock: opts.clock } : {}),
    });
  } catch (err) {
    await database.close();
    await dropDatabase();
    throw err;
  }
  const address = await cp.app.listen({ host: "127.0.0.1", port: config.port });
  return {
    cp,
    url: address,
    kind,
    admin: () => signedInAdmin(address),
    async close() {
      await cp.close();
      await database.close();
      await dropDatabase();
      if (!opts.dataDir) await rm(dataDir, { recursive: true, force: true });
    },
  };
}
