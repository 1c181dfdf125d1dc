import type { Ctx } from "../context.ts";
import type { ExclusiveResult, ExclusiveTask } from "../db/exclusive.ts";
import { purgeExpiredGrants } from "./access.ts";
import { hibernateIdleBoxes } from "./idle.ts";
import { reapExpiredJobs } from "./jobs.ts";
import { purgeRateWindows } from "./rate-limits.ts";
import { markUnreachableServers } from "./servers.ts";

/** Rate-limit keys idle longer than this are of no window any more. */
const RATE_KEYS_KEEP_MS = 60 * 60_000;

/** Runs a periodic task on this replica unless another replica is running it now. */
export function runExclusive<T>(
  ctx: Ctx,
  task: ExclusiveTask,
  fn: () => Promise<T>,
): Promise<ExclusiveResult<T>> {
  return ctx.tasks.run(task, fn);
}

/**
 * One tick of the lease reaper (apps/api/src/services/jobs.ts), on one replica at a time;
 * it also drops rate-limit attempts no window needs and box-access grants no cookie outlives.
 */
export function reapTick(ctx: Ctx) {
  return runExclusive(ctx, "lease-reaper", async () => {
    const reaped = await reapExpiredJobs(ctx);
    await purgeRateWindows(ctx.db, ctx.clock.now().getTime(), RATE_KEYS_KEEP_MS);
    await purgeExpiredGrants(ctx);
    return reaped;
  });
}

/** One tick of the host liveness check (services/servers.ts), on one replica at a time. */
export function livenessTick(ctx: Ctx) {
  return runExclusive(ctx, "server-liveness", () => markUnreachableServers(ctx));
}

/** One sweep of idle boxes into hibernation (services/idle.ts), on one replica at a time. */
export function idleTick(ctx: Ctx) {
  return runExclusive(ctx, "idle-sweep", () => hibernateIdleBoxes(ctx));
}
