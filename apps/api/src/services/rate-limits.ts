import type { FastifyRateLimitStore } from "@fastify/rate-limit";
import { and, asc, eq, lt, lte, sql } from "drizzle-orm";
import type { RouteOptions } from "fastify";
import type { Db } from "../db/client.ts";
import { rateHits } from "../db/schema.ts";

/** Advisory-lock class of rate keys (the other classes: db/exclusive.ts, db/client.ts). */
const RATE_LOCK = 0x646f72;

/**
 * At most `limit` events per key in any `windowMs` (a sliding window), counted in the
 * database so every replica sees every attempt. One transaction per attempt, serialized
 * per key by an advisory lock, so two replicas cannot both let the last one through.
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
   * with this one (`limit + 1` when refused) and the ms until the oldest leaves. Each call
   * reads at most `limit` rows, however hard a client hammers.
   */
  count(key: string, now: number): Promise<{ current: number; resetMs: number }> {
    const k = `${this.scope}:${key}`;
    return this.db.transaction(async (tx) => {
      await tx.execute(sql`select pg_advisory_xact_lock(${RATE_LOCK}, hashtext(${k}))`);
      await tx
        .delete(rateHits)
        .where(and(eq(rateHits.key, k), lte(rateHits.at, new Date(now - this.windowMs))));
      const recent = await tx
        .select({ at: rateHits.at })
        .from(rateHits)
        .where(eq(rateHits.key, k))
        .orderBy(asc(rateHits.at))
        .limit(this.limit);
      const oldest = recent[0]?.at.getTime() ?? now;
      const resetMs = oldest + this.windowMs - now;
      if (recent.length >= this.limit) return { current: this.limit + 1, resetMs };
      await tx.insert(rateHits).values({ key: k, at: new Date(now) });
      return { current: recent.length + 1, resetMs };
    });
  }
}

/** Drops attempts older than `maxWindowMs` of keys that were not used since (periodic). */
export async function purgeRateHits(db: Db, now: number, maxWindowMs: number): Promise<void> {
  await db.delete(rateHits).where(lt(rateHits.at, new Date(now - maxWindowMs)));
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
