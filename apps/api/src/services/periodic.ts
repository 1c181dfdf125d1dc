import type { Ctx } from "../context.ts";
import { purgeExpiredGrants } from "./access.ts";
import { hibernateIdleBoxes } from "./idle.ts";
import { reapExpiredJobs } from "./jobs.ts";
import { purgeRateWindows } from "./rate-limits.ts";
import { markUnreachableServers } from "./servers.ts";

/** Rate-limit keys idle longer than this are of no window any more. */
const RATE_KEYS_KEEP_MS = 60 * 60_000;

/**
 * One tick of the lease reaper (apps/api/src/services/jobs.ts), on one replica at a time;
 * it also drops rate-limit attempts no window needs and box-access grants no cookie outlives.
 */
export function reapTick(ctx: Ctx) {
  return ctx.tasks.run("lease-reaper", async () => {
    const reaped = await reapExpiredJobs(ctx);
    await purgeRateWindows(ctx.db, ctx.clock.now().getTime(), RATE_KEYS_KEEP_MS);
    await purgeExpiredGrants(ctx);
    return reaped;
  });
}

/** One tick of the host liveness check (services/servers.ts), on one replica at a time. */
export function livenessTick(ctx: Ctx) {
  return ctx.tasks.run("server-liveness", () => markUnreachableServers(ctx));
}

/** One sweep of idle boxes into hibernation (services/idle.ts), on one replica at a time. */
export function idleTick(ctx: Ctx) {
  return ctx.tasks.run("idle-sweep", () => hibernateIdleBoxes(ctx));
}
