import { sql } from "drizzle-orm";
import pg from "pg";
import pino from "pino";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { type Database, type Db, openDatabase } from "../src/db/client.ts";
import { dbUnavailable, freshPostgresDatabase } from "./support/control-plane.ts";

const why = dbUnavailable("postgres");
if (why) console.warn(`SKIPPING pooled transactions: ${why}`);

const checkOut = pg.Pool.prototype.connect as (this: pg.Pool) => Promise<pg.PoolClient>;

describe.skipIf(why !== null)("the control plane's transactions on PostgreSQL", () => {
  let fresh: Awaited<ReturnType<typeof freshPostgresDatabase>>;
  let database: Database;
  let admin: pg.Client;

  beforeAll(async () => {
    fresh = await freshPostgresDatabase();
    // Two connections, the least the control plane runs with: two slots lost are all of them.
    database = await openDatabase({
      databaseUrl: fresh.url,
      dataDir: "unused",
      log: pino({ level: "silent" }),
      poolSize: 2,
      connectTimeoutMs: 2_000,
    });
    admin = new pg.Client({ connectionString: fresh.url });
    await admin.connect();
  });
  afterEach(() => {
    vi.restoreAllMocks();
  });
  afterAll(async () => {
    await admin?.end();
    await database?.close();
    await fresh?.drop();
  });

  /** The pool's next checkout hands out a client whose connection the server ended meanwhile. */
  function nextClientDead(): void {
    vi.spyOn(pg.Pool.prototype, "connect").mockImplementationOnce(async function (this: pg.Pool) {
      const client = await checkOut.call(this);
      const ended = new Promise((resolve) => client.once("error", resolve));
      await admin.query("select pg_terminate_backend($1)", [
        (client as unknown as { processID: number }).processID,
      ]);
      await ended;
      return client;
    } as unknown as typeof pg.Pool.prototype.connect);
  }

  const one = (tx: Db) =>
    tx.execute(sql`select 1 as n`).then((r) => (r as unknown as pg.QueryResult).rows[0]?.n);

  it("gives back a connection whose BEGIN failed (a server restart), so the pool never runs dry", async () => {
    for (let i = 0; i < 2; i++) {
      nextClientDead();
      let ran = false;
      await expect(
        database.db.transaction(async () => {
          ran = true;
        }),
      ).rejects.toThrow(/begin/);
      expect(ran).toBe(false);
    }
    expect(await database.db.transaction(one)).toBe(1);
    // A transaction that fails after it began gives its connection back too.
    await expect(
      database.db.transaction(async (tx) => {
        await one(tx);
        throw new Error("changed my mind");
      }),
    ).rejects.toThrow("changed my mind");
    expect(await Promise.all([database.db.transaction(one), database.db.transaction(one)])).toEqual([1, 1]);
  });
});
