import { sql } from "drizzle-orm";
import pg from "pg";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { type Database, openDatabase } from "../src/db/client.ts";
import { processTasks } from "../src/db/exclusive.ts";
import { dbUnavailable, freshPostgresDatabase } from "./support/control-plane.ts";

/** A task's work, held open until `release()`; `inside` settles once it has started. */
function held<T>(value: T) {
  let release = () => {};
  let entered = () => {};
  const gate = new Promise<void>((r) => {
    release = r;
  });
  const inside = new Promise<void>((r) => {
    entered = r;
  });
  const work = async () => {
    entered();
    await gate;
    return value;
  };
  return { work, inside, release };
}

describe("tasks of a single process (PGlite)", () => {
  it("pass a tick while the same task still runs, and run other tasks beside it", async () => {
    const tasks = processTasks();
    const reaper = held("first");
    const first = tasks.run("lease-reaper", reaper.work);
    await reaper.inside;
    expect(await tasks.run("lease-reaper", async () => "second")).toEqual({ ran: false });
    expect(await tasks.run("billing", async () => "billing")).toEqual({ ran: true, value: "billing" });
    reaper.release();
    expect(await first).toEqual({ ran: true, value: "first" });
    expect(await tasks.run("lease-reaper", async () => "third")).toEqual({ ran: true, value: "third" });
  });
});

const why = dbUnavailable("postgres");
if (why) console.warn(`SKIPPING one-at-a-time tasks on PostgreSQL: ${why}`);

describe.skipIf(why !== null)("tasks of replicas on one PostgreSQL", () => {
  let fresh: Awaited<ReturnType<typeof freshPostgresDatabase>>;
  let a: Database;
  let b: Database;
  let admin: pg.Client;
  const open = () =>
    openDatabase({
      databaseUrl: fresh.url,
      dataDir: "unused",
      log: pino({ level: "silent" }),
      // The least a replica runs with; a task that waits for a connection fails in 2 s.
      poolSize: 2,
      connectTimeoutMs: 2_000,
    });

  beforeAll(async () => {
    fresh = await freshPostgresDatabase();
    a = await open();
    b = await open();
    admin = new pg.Client({ connectionString: fresh.url });
    await admin.connect();
  });
  afterAll(async () => {
    await admin?.end();
    await a?.close();
    await b?.close();
    await fresh?.drop();
  });

  /** The backends of `replica`'s connections that hold an advisory lock. */
  async function advisoryHolders(replica: Database): Promise<number[]> {
    const holders = await admin.query<{ pid: number }>(
      `select l.pid from pg_locks l join pg_stat_activity s using (pid)
        where l.locktype = 'advisory' and s.application_name = $1`,
      [replica.applicationName],
    );
    return holders.rows.map((r) => r.pid);
  }

  it("run two tasks at once on a pool of two, each using the pool for its work", async () => {
    // Each task holds its lock while its work takes a transaction and then a statement.
    const work = (n: number) => async () => {
      await a.db.transaction(async (tx) => {
        await tx.execute(sql`select pg_sleep(0.2)`);
      });
      const answer = await a.db.execute(sql`select ${n}::int as n`);
      return (answer as unknown as { rows: Array<{ n: number }> }).rows[0]?.n;
    };
    const results = await Promise.all([
      a.tasks.run("lease-reaper", work(1)),
      a.tasks.run("billing", work(2)),
    ]);
    expect(results).toEqual([
      { ran: true, value: 1 },
      { ran: true, value: 2 },
    ]);
  });

  it("pass a task another replica or this one is running, and free it when it ends, even by throwing", async () => {
    const reaper = held("a");
    const onA = a.tasks.run("lease-reaper", reaper.work);
    await reaper.inside;
    expect(await b.tasks.run("lease-reaper", async () => "b")).toEqual({ ran: false });
    expect(await a.tasks.run("lease-reaper", async () => "a again")).toEqual({ ran: false });
    expect(await b.tasks.run("idle-sweep", async () => "b")).toEqual({ ran: true, value: "b" });
    reaper.release();
    expect(await onA).toEqual({ ran: true, value: "a" });

    await expect(
      a.tasks.run("lease-reaper", async () => {
        throw new Error("tick failed");
      }),
    ).rejects.toThrow("tick failed");
    expect(await b.tasks.run("lease-reaper", async () => "b")).toEqual({ ran: true, value: "b" });
  });

  it("lose their locks with their connection, and take them again on a new one", async () => {
    const reaper = held("a");
    const onA = a.tasks.run("lease-reaper", reaper.work);
    await reaper.inside;
    const holders = await advisoryHolders(a);
    expect(holders).toHaveLength(1);
    await admin.query("select pg_terminate_backend($1)", [holders[0]]);
    // The lock went with the connection: another replica may take the task now.
    await expect.poll(() => b.tasks.run("lease-reaper", async () => "b")).toEqual({ ran: true, value: "b" });
    reaper.release();
    expect(await onA).toEqual({ ran: true, value: "a" });
    // The next run connects again, and holds its lock against the other replica.
    const again = held("a again");
    const secondA = a.tasks.run("lease-reaper", again.work);
    await again.inside;
    expect(await b.tasks.run("lease-reaper", async () => "b")).toEqual({ ran: false });
    again.release();
    expect(await secondA).toEqual({ ran: true, value: "a again" });
  });

  /** The backend of `a`'s lock connection, seen while a held task of `a` runs. */
  async function lockHolder(): Promise<number> {
    const reaper = held("a");
    const onA = a.tasks.run("lease-reaper", reaper.work);
    await reaper.inside;
    const holders = await advisoryHolders(a);
    reaper.release();
    await onA;
    expect(holders).toHaveLength(1);
    return holders[0]!;
  }

  it("give up a lock connection that failed a query, and take the next lock on a new one", async () => {
    const before = await lockHolder();
    // The next statement on any connection, the lock query, fails as a read timeout would.
    vi.spyOn(pg.Client.prototype, "query").mockRejectedValueOnce(new Error("Query read timeout"));
    await expect(a.tasks.run("lease-reaper", async () => "a")).rejects.toThrow("Query read timeout");
    vi.restoreAllMocks();
    expect(await lockHolder()).not.toBe(before);
  });
});
