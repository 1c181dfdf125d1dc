import type { FastifyRateLimitStore } from "@fastify/rate-limit";
import { sql } from "drizzle-orm";
import type { RouteOptions } from "fastify";
import { z } from "zod";
import type { Db } from "../db/client.ts";
import { rateWindows } from "../db/schema.ts";

/** The upsert's answer: attempts in the window after it, the oldest one's time, refused or not. */
const Counted = z.object({
  rows: z.array(z.object({ n: z.coerce.number(), oldest_ms: z.coerce.number(), refused: z.boolean() })),
});

/**
 * At most `limit` events per key in any `windowMs` (a sliding window), counted in the
 * database so every replica sees every attempt. One statement per attempt: an upsert of the
 * key's row, which PostgreSQL locks, so attempts on one key count in turn and two replicas
 * cannot both let the last one through.
 */
export class RateWindow {
  constructor(
    private readonly db: Db,
    /** Keys of different limits never meet (`login:…`, `box-create:…`). */
    private readonly scope: string,
    readonly limit: number,
    readonly windowMs: number,
  ) {}

  /**
   * Records an event for `key` at `now` and returns 0, or returns the ms until one is
   * allowed (a refused attempt is not recorded).
   */
  async take(key: string, now: number): Promise<number> {
    const r = await this.count(key, now);
    return r.current > this.limit ? r.resetMs : 0;
  }

  /**
   * Like `take`, answered as @fastify/rate-limit's stores answer: the attempts in the window
   * with this one (`limit + 1` when refused) and the ms until the oldest leaves. A key's row
   * holds at most `limit` times, however hard a client hammers.
   */
  async count(key: string, now: number): Promise<{ current: number; resetMs: number }> {
    const at = new Date(now).toISOString();
    const cutoff = new Date(now - this.windowMs).toISOString();
    // The window keeps the key's attempts after the cutoff, and this one unless it is full.
    const result = await this.db.execute(sql`
      insert into ${rateWindows} as w (key, hits, refused)
      values (${`${this.scope}:${key}`}, array[${at}::timestamptz], false)
      on conflict (key) do update set (hits, refused) = (
        select case when held >= ${this.limit} then kept else kept || ${at}::timestamptz end,
               held >= ${this.limit}
        from (select coalesce(array_agg(h order by h), '{}') as kept, count(*) as held
              from unnest(w.hits) as h where h > ${cutoff}::timestamptz) as window_now
      )
      returning cardinality(hits) as n, extract(epoch from hits[1]) * 1000 as oldest_ms, refused`);
    const row = Counted.parse(result).rows[0]!;
    const resetMs = Math.max(0, Math.ceil(row.oldest_ms + this.windowMs - now));
    return { current: row.refused ? this.limit + 1 : row.n, resetMs };
  }
}

/** Drops the keys whose newest attempt is older than `maxWindowMs` (periodic). */
export async function purgeRateWindows(db: Db, now: number, maxWindowMs: number): Promise<void> {
  const cutoff = new Date(now - maxWindowMs).toISOString();
  await db
    .delete(rateWindows)
    .where(
      sql`coalesce(${rateWindows.hits}[cardinality(${rateWindows.hits})] < ${cutoff}::timestamptz, true)`,
    );
}

/**
 * A store for @fastify/rate-limit (routes with `config.rateLimit`) that counts in the
 * database, so the limit holds across replicas: each route counts in its own scope.
 */
export function databaseRateStore(db: Db) {
  return class DatabaseRateStore implements FastifyRateLimitStore {
    constructor(
      _options: unknown,
      private readonly scope = "route:*",
    ) {}

    incr(
      key: string,
      cb: (err: Error | null, result?: { current: number; ttl: number }) => void,
      timeWindow: number,
      max: number,
    ): void {
      new RateWindow(db, this.scope, max, timeWindow).count(key, Date.now()).then(
        ({ current, resetMs }) => cb(null, { current, ttl: resetMs }),
        (err: Error) => cb(err),
      );
    }

    child(routeOptions: RouteOptions & { path: string; prefix: string }): DatabaseRateStore {
      // The plugin passes the route's merged limit settings with the route itself as
      // `routeInfo` (see @fastify/rate-limit's index.js), whatever its types say.
      const merged: {
        method?: string | string[];
        url?: string;
        routeInfo?: { method?: string | string[]; url?: string };
      } = routeOptions;
      const route = merged.routeInfo ?? merged;
      return new DatabaseRateStore(null, `route:${String(route.method)} ${route.url}`);
    }
  };
}
