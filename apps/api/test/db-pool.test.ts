import { sql } from "drizzle-orm";
import pg from "pg";
import pino from "pino";
import { describe, expect, it } from "vitest";
import { loadConfig } from "../src/config.ts";
import { openDatabase } from "../src/db/client.ts";
import { servers } from "../src/db/schema.ts";
import { longPollClaim } from "../src/services/jobs.ts";
import { heartbeat, registerServer } from "./support/client.ts";
import { dbUnavailable, freshPostgresDatabase, startControlPlane } from "./support/control-plane.ts";

describe("the PostgreSQL pools", () => {
  it("comes from DOPPIO_DATABASE_POOL_SIZE, and a size that cannot work is refused", () => {
    expect(loadConfig({}).databasePoolSize).toBe(10);
    expect(loadConfig({ DOPPIO_DATABASE_POOL_SIZE: "7" }).databasePoolSize).toBe(7);
    expect(() => loadConfig({ DOPPIO_DATABASE_POOL_SIZE: "1" })).toThrow(/databasePoolSize/);
    expect(() => loadConfig({ DOPPIO_DATABASE_POOL_SIZE: "many" })).toThrow(/databasePoolSize/);
  });

  const why = dbUnavailable("postgres");
  if (why) console.warn(`[db-pool] PostgreSQL part SKIPPED: ${why}`);

  it.skipIf(why !== null)("bounds the statements one replica runs at once", async () => {
    const fresh = await freshPostgresDatabase();
    const database = await openDatabase({
      databaseUrl: fresh.url,
      dataDir: "unused",
      log: pino({ level: "silent" }),
      poolSize: 3,
    });
    try {
      // Eight statements at once, each sleeping while it counts the probes in flight: on
      // three connections no more than three can ever be running.
      const probe = () =>
        database.db.execute(
          sql`select (select count(*)::int from pg_stat_activity
                      where datname = current_database() and query like '%doppio-pool-probe%' and pid <> pg_backend_pid()) + 1 as n,
                     pg_sleep(0.3) /* doppio-pool-probe */`,
        );
      const results = await Promise.all(Array.from({ length: 8 }, probe));
      const inFlight = results.map((r) => Number((r as { rows: Array<{ n: number }> }).rows[0]!.n));
      expect(Math.max(...inFlight)).toBe(3);
    } finally {
      await database.close();
      await fresh.drop();
    }
  });

  it.skipIf(why !== null)(
    "hands a pending job to its agent while users' statements hold every pooled connection",
    async () => {
      const env = await startControlPlane({ kind: "postgres", config: { databasePoolSize: 2 } });
      try {
        const admin = await env.admin();
        const agent = await registerServer(admin, "host-a");
        await agent.post("/agent/v1/heartbeat", heartbeat());
        expect((await admin.post("/api/v1/boxes", { template: "minimal", name: "lane" })).status).toBe(202);
        const { db } = env.cp.ctx;
        const [server] = await db.select({ id: servers.id }).from(servers);
        // Both of the pool's connections busy for 3 s (users' slow statements) ...
        const finished: string[] = [];
        const slow = [1, 2].map(() =>
          db.execute(sql.raw(SLOW_STATEMENT)).then(() => finished.push("a user's statement")),
        );
        await expect.poll(() => activeSleeps(env.cp.ctx.config.databaseUrl!), { timeout: 5_000 }).toBe(2);
        // ... and the claim a create's commit wakes (its agent already authenticated) still
        // runs at once, on the claim lane.
        const claim = longPollClaim(env.cp.ctx, server!.id, 4, 0, new AbortController().signal).then(
          (jobs) => {
            finished.push("the claim");
            return jobs;
          },
        );
        const jobs = await claim;
        await Promise.all(slow);
        expect(jobs.map((j) => [j.action, j.box])).toEqual([["create", "lane"]]);
        expect(finished).toEqual(["the claim", "a user's statement", "a user's statement"]);
      } finally {
        await env.close();
      }
    },
  );

  it.skipIf(why !== null)(
    "lets one host's flood of long-polls hold at most one of the claim lane's connections",
    async () => {
      const env = await startControlPlane({ kind: "postgres" });
      const url = env.cp.ctx.config.databaseUrl!;
      const locker = new pg.Client({ connectionString: url });
      try {
        const admin = await env.admin();
        const quiet = await registerServer(admin, "host-quiet");
        await quiet.post("/agent/v1/heartbeat", heartbeat());
        expect((await admin.post("/api/v1/boxes", { template: "minimal", name: "waiting" })).status).toBe(
          202,
        );
        await registerServer(admin, "host-flooding");
        const ids = Object.fromEntries(
          (await env.cp.ctx.db.select({ id: servers.id, name: servers.name }).from(servers)).map((s) => [
            s.name,
            s.id,
          ]),
        );
        // Every claim statement waits on the jobs table while this lock is held.
        await locker.connect();
        await locker.query("begin; lock table agent_jobs in access exclusive mode");
        const poll = (server: string) =>
          longPollClaim(env.cp.ctx, ids[server]!, 4, 0, new AbortController().signal);
        let answered = 0;
        const floodPoll = () =>
          poll("host-flooding").then((jobs) => {
            answered++;
            return jobs;
          });
        // The host's first poll's statement waits in PostgreSQL, then nine more polls come:
        // each ends the one before it, and the eight between the first and the last are
        // answered at once ...
        const flood = [floodPoll()];
        await expect.poll(() => claimsWaiting(url), { timeout: 5_000 }).toBe(1);
        flood.push(...Array.from({ length: 9 }, floodPoll));
        await expect.poll(() => answered, { timeout: 5_000 }).toBe(8);
        expect(await claimsWaiting(url)).toBe(1);
        // ... so another host's claim gets the lane's other connection, not a place in a queue.
        const quietClaim = poll("host-quiet");
        await expect.poll(() => claimsWaiting(url), { timeout: 5_000 }).toBe(2);
        await locker.query("commit");
        expect((await quietClaim).map((j) => [j.action, j.box])).toEqual([["create", "waiting"]]);
        expect(await Promise.all(flood)).toEqual(flood.map(() => []));
      } finally {
        await locker.end().catch(() => {});
        await env.close();
      }
    },
  );
});

/** Claim statements (services/jobs.ts claimJobs) waiting for a lock in the database at `url`. */
async function claimsWaiting(url: string): Promise<number> {
  return countActivity(url, "wait_event_type = 'Lock' and query like '%skip locked%'");
}

const SLOW_STATEMENT = "select pg_sleep(3)";

/** How many SLOW_STATEMENTs are running in the database at `url` (asked on a connection of its own). */
async function activeSleeps(url: string): Promise<number> {
  return countActivity(url, "query = $1 and state = 'active'", [SLOW_STATEMENT]);
}

/** Backends of the database at `url` that match `where` (asked on a connection of its own). */
async function countActivity(url: string, where: string, params: unknown[] = []): Promise<number> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query(
      `select count(*)::int as n from pg_stat_activity where datname = current_database() and ${where}`,
      params,
    );
    return rows[0].n;
  } finally {
    await client.end();
  }
}
