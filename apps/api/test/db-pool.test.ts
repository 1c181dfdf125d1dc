import { sql } from "drizzle-orm";
import pino from "pino";
import { describe, expect, it } from "vitest";
import { loadConfig } from "../src/config.ts";
import { openDatabase } from "../src/db/client.ts";
import { dbUnavailable, freshPostgresDatabase } from "./support/control-plane.ts";

describe("the PostgreSQL pool's size", () => {
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
});
