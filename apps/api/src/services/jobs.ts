import {
  type BoxAction,
  type ClaimedJob,
  type Job,
  type JobAction,
  type JobEvent,
  SETTLED_STATUS,
} from "@doppio/contracts";
import { and, asc, desc, eq, inArray, lt, sql } from "drizzle-orm";
import { newId } from "../auth/secrets.ts";
import type { Ctx } from "../context.ts";
import type { Db } from "../db/client.ts";
import { agentJobs, boxes } from "../db/schema.ts";
import { applyJobEvents, isFinal } from "../domain/job-events.ts";
import { notFound } from "../errors.ts";
import { publishBox } from "./box-view.ts";

export type JobRow = typeof agentJobs.$inferSelect;

const MAX_DELIVERY_ATTEMPTS = 5;

export function toJob(
  row: JobRow,
  boxSlug: string | null,
  serverName: string,
): Job & { boxSlug: string | null } {
  return {
    id: row.id,
    action: row.action,
    box: boxSlug,
    boxSlug,
    server: serverName,
    status: row.status,
    attempts: row.attempts,
    steps: row.steps.map((s) => ({ ...s, detail: s.detail ?? null })) as Job["steps"],
    error: row.error,
    result: row.result,
    log: row.log,
    createdAt: row.createdAt.toISOString(),
    startedAt: row.startedAt?.toISOString() ?? null,
    finishedAt: row.finishedAt?.toISOString() ?? null,
  };
}

/** Inserts a job inside the caller's transaction; call `ctx.bus.jobEnqueued` after commit. */
export async function insertJob(
  ctx: Ctx,
  tx: Db,
  job: { action: JobAction; boxId: string | null; serverId: string; payload: Record<string, unknown> },
): Promise<JobRow> {
  const [row] = await tx
    .insert(agentJobs)
    .values({ id: newId(), ...job, createdAt: ctx.clock.now() })
    .returning();
  ctx.metrics.jobsEnqueued.inc({ action: job.action });
  return row!;
}

/** Hands up to `max` pending jobs of the server to its agent under a delivery lease (one statement). */
export async function claimJobs(ctx: Ctx, serverId: string, max: number): Promise<ClaimedJob[]> {
  const leaseExpiresAt = new Date(ctx.clock.now().getTime() + ctx.config.deliveryLeaseMs);
  const next = ctx.db
    .select({ id: agentJobs.id })
    .from(agentJobs)
    .where(and(eq(agentJobs.serverId, serverId), eq(agentJobs.status, "pending")))
    .orderBy(asc(agentJobs.seqNo))
    .limit(max)
    .for("update", { skipLocked: true });
  const rows = await ctx.db
    .update(agentJobs)
    .set({ status: "delivered", leaseExpiresAt, attempts: sql`${agentJobs.attempts} + 1` })
    .where(inArray(agentJobs.id, next))
    .returning();
  return rows
    .sort((a, b) => a.seqNo - b.seqNo)
    .map((r) => ({
      id: r.id,
      action: r.action,
      box: r.boxId ? String(r.payload.slug) : null,
      payload: r.payload,
      attempt: r.attempts,
      leaseExpiresAt: leaseExpiresAt.toISOString(),
    }));
}

/**
 * Claims at once if anything is pending; otherwise holds the request until a job for the
 * server is enqueued (the bus wakes it), `waitMs` passes, or the agent hangs up.
 */
export async function longPollClaim(
  ctx: Ctx,
  serverId: string,
  max: number,
  waitMs: number,
  signal: AbortSignal,
): Promise<ClaimedJob[]> {
  const deadline = Date.now() + Math.min(waitMs, ctx.config.maxClaimWaitMs);
  const watch = ctx.bus.watchJobs(serverId);
  ctx.metrics.claimWaiters.inc();
  try {
    for (;;) {
      const jobs = await claimJobs(ctx, serverId, max);
      const left = deadline - Date.now();
      if (jobs.length > 0 || left <= 0 || signal.aborted) return jobs;
      await watch.wait(left, signal);
      if (signal.aborted) return [];
    }
  } finally {
    watch.close();
    ctx.metrics.claimWaiters.dec();
  }
}

/**
 * Applies an agent's events to one of ITS jobs (another server's job is "not found").
 * Idempotent: replays and stale sequences change nothing; a finished job never changes.
 */
export async function applyAgentEvents(
  ctx: Ctx,
  server: { id: string; name: string },
  jobId: string,
  events: JobEvent[],
): Promise<{ applied: number; lastSeq: number }> {
  const now = ctx.clock.now();
  const outcome = await ctx.db.transaction(async (tx) => {
    const [job] = await tx
      .select()
      .from(agentJobs)
      .where(and(eq(agentJobs.id, jobId), eq(agentJobs.serverId, server.id)))
      .for("update");
    if (!job) throw notFound("job");
    const { state, applied } = applyJobEvents(job, events);
    if (applied.length === 0) return { job, applied, boxChanged: false };
    const [updated] = await tx
      .update(agentJobs)
      .set({
        ...state,
        leaseExpiresAt: isFinal(state.status) ? null : new Date(now.getTime() + ctx.config.runningLeaseMs),
      })
      .where(eq(agentJobs.id, jobId))
      .returning();
    const result = applied.find((e) => e.type === "result");
    let boxChanged = false;
    if (result && updated!.boxId && isBoxAction(updated!.action)) {
      await settleBox(tx, updated!.boxId, updated!.action, result, now);
      boxChanged = true;
    }
    return { job: updated!, applied, boxChanged };
  });
  if (outcome.applied.length > 0) {
    if (isFinal(outcome.job.status)) {
      ctx.metrics.jobsFinished.inc({ action: outcome.job.action, status: outcome.job.status });
    }
    await publishJobAndBox(ctx, outcome.job);
  }
  return { applied: outcome.applied.length, lastSeq: outcome.job.lastSeq };
}

function isBoxAction(action: JobAction): action is BoxAction {
  return action !== "build_golden" && action !== "build_image";
}

async function settleBox(
  tx: Db,
  boxId: string,
  action: BoxAction,
  result: Extract<JobEvent, { type: "result" }>,
  now: Date,
): Promise<void> {
  if (!result.ok) {
    await tx
      .update(boxes)
      .set({ status: "error", statusReason: result.error ?? `${action} failed`, updatedAt: now })
      .where(eq(boxes.id, boxId));
    return;
  }
  const ip = typeof result.data?.ip === "string" ? result.data.ip : undefined;
  await tx
    .update(boxes)
    .set({
      status: SETTLED_STATUS[action],
      statusReason: null,
      updatedAt: now,
      ...(ip !== undefined ? { ip } : {}),
      ...(action === "delete" ? { deletedAt: now, ip: null } : {}),
    })
    .where(eq(boxes.id, boxId));
}

async function publishJobAndBox(ctx: Ctx, job: JobRow): Promise<void> {
  if (!job.boxId) return;
  const box = await publishBox(ctx, job.boxId);
  if (box) ctx.bus.publish(box.teamId, { type: "job", job: toJob(job, box.slug, box.serverName ?? "") });
}

/**
 * Expired leases: a delivered job the agent never acknowledged goes back to pending (up to
 * MAX_DELIVERY_ATTEMPTS); a running job whose agent went silent fails with a reason, and
 * its box shows the error.
 */
export async function reapExpiredJobs(ctx: Ctx): Promise<{ requeued: number; failed: number }> {
  const now = ctx.clock.now();
  const expired = await ctx.db
    .select()
    .from(agentJobs)
    .where(and(inArray(agentJobs.status, ["delivered", "running"]), lt(agentJobs.leaseExpiresAt, now)));
  let requeued = 0;
  let failed = 0;
  for (const job of expired) {
    const retry = job.status === "delivered" && job.attempts < MAX_DELIVERY_ATTEMPTS;
    const reason =
      job.status === "delivered"
        ? `the agent did not acknowledge the job after ${job.attempts} deliveries`
        : "the agent stopped reporting progress before the job finished (lease expired)";
    const changed = await ctx.db.transaction(async (tx) => {
      const rows = await tx
        .update(agentJobs)
        .set(
          retry
            ? { status: "pending", leaseExpiresAt: null }
            : { status: "failed", error: reason, finishedAt: now, leaseExpiresAt: null },
        )
        .where(
          and(eq(agentJobs.id, job.id), eq(agentJobs.status, job.status), lt(agentJobs.leaseExpiresAt, now)),
        )
        .returning();
      if (rows.length > 0 && !retry && job.boxId) {
        await tx
          .update(boxes)
          .set({ status: "error", statusReason: reason, updatedAt: now })
          .where(eq(boxes.id, job.boxId));
      }
      return rows[0];
    });
    if (!changed) continue;
    if (retry) {
      requeued++;
      ctx.metrics.jobsReaped.inc({ outcome: "requeued" });
      ctx.bus.jobEnqueued(job.serverId);
    } else {
      failed++;
      ctx.metrics.jobsReaped.inc({ outcome: "failed" });
      ctx.log.warn({ job: job.id, action: job.action, box: job.boxId }, "job lease expired; failed");
      await publishJobAndBox(ctx, changed);
    }
  }
  return { requeued, failed };
}

/** Extends the leases of jobs an agent says it holds (from its heartbeat). */
export async function extendLeases(ctx: Ctx, serverId: string, jobIds: string[]): Promise<void> {
  if (jobIds.length === 0) return;
  const now = ctx.clock.now().getTime();
  await ctx.db
    .update(agentJobs)
    .set({ leaseExpiresAt: new Date(now + ctx.config.runningLeaseMs) })
    .where(
      and(
        eq(agentJobs.serverId, serverId),
        inArray(agentJobs.id, jobIds),
        inArray(agentJobs.status, ["delivered", "running"]),
      ),
    );
}

export async function listBoxJobs(ctx: Ctx, boxId: string, limit = 50): Promise<JobRow[]> {
  return ctx.db
    .select()
    .from(agentJobs)
    .where(eq(agentJobs.boxId, boxId))
    .orderBy(desc(agentJobs.seqNo))
    .limit(limit);
}
