import {
  type BoxAction,
  type ClaimedJob,
  isBoxAction,
  isFinalJobStatus,
  type Job,
  type JobAction,
  type JobEvent,
  type JobOutcome,
  type JobPayloadInput,
  type ProtocolJobErrorCode,
  SETTLED_STATUS,
} from "@doppio/contracts";
import { and, asc, desc, eq, inArray, lt, sql } from "drizzle-orm";
import { newId } from "../auth/secrets.ts";
import type { Ctx } from "../context.ts";
import type { Db } from "../db/client.ts";
import { agentJobs, boxes, servers } from "../db/schema.ts";
import { applyJobEvents } from "../domain/job-events.ts";
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
    steps: row.steps.map((s) => ({ ...s, detail: s.detail ?? null })),
    error: row.error,
    errorCode: row.errorCode,
    result: row.result,
    log: row.log,
    createdAt: row.createdAt.toISOString(),
    startedAt: row.startedAt?.toISOString() ?? null,
    finishedAt: row.finishedAt?.toISOString() ?? null,
  };
}

/**
 * Inserts a job inside the caller's transaction; call `ctx.bus.jobEnqueued` after commit.
 * The payload is typed by the action's contract (JobSpec in packages/contracts/src/agent-protocol.ts).
 */
export async function insertJob<A extends JobAction>(
  ctx: Ctx,
  tx: Db,
  job: { action: A; boxId: string | null; serverId: string; payload: JobPayloadInput<A> },
): Promise<JobRow> {
  const [row] = await tx
    .insert(agentJobs)
    .values({ id: newId(), ...job, createdAt: ctx.clock.now() })
    .returning();
  ctx.metrics.jobsEnqueued.inc({ action: job.action });
  return row!;
}

/**
 * Hands up to `max` pending jobs of the server to its agent under a delivery lease (one
 * statement, on the claim lane).
 */
async function claimJobs(ctx: Ctx, serverId: string, max: number): Promise<ClaimedJob[]> {
  const leaseExpiresAt = new Date(ctx.clock.now().getTime() + ctx.config.deliveryLeaseMs);
  const next = ctx.claimDb
    .select({ id: agentJobs.id })
    .from(agentJobs)
    .where(
      and(
        eq(agentJobs.serverId, serverId),
        eq(agentJobs.status, "pending"),
        // A disabled server's jobs wait until it is active again.
        sql`(select ${servers.status} from ${servers} where ${servers.id} = ${serverId}) <> 'disabled'`,
      ),
    )
    .orderBy(asc(agentJobs.seqNo))
    .limit(max)
    .for("update", { skipLocked: true });
  const rows = await ctx.claimDb
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
  const seat = ctx.claimSeats.take(serverId);
  const watch = ctx.bus.watchJobs(serverId);
  ctx.metrics.claimWaiters.inc();
  try {
    await seat.turn;
    const ended = AbortSignal.any([signal, seat.superseded]);
    for (;;) {
      if (ended.aborted) break;
      const jobs = await claimJobs(ctx, serverId, max);
      const left = deadline - Date.now();
      if (jobs.length > 0 || left <= 0 || ended.aborted) return jobs;
      await watch.wait(left, ended);
    }
    if (seat.superseded.aborted) ctx.metrics.claimsSuperseded.inc();
    return [];
  } finally {
    seat.leave();
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
    const { state, applied, outcome } = applyJobEvents(job.action, job, events);
    if (applied.length === 0) return { job, applied, boxChanged: false };
    const [updated] = await tx
      .update(agentJobs)
      .set({
        ...state,
        leaseExpiresAt: isFinalJobStatus(state.status)
          ? null
          : new Date(now.getTime() + ctx.config.runningLeaseMs),
      })
      .where(eq(agentJobs.id, jobId))
      .returning();
    let boxChanged = false;
    if (outcome && updated!.boxId) {
      await settleBox(tx, updated!.boxId, outcome, now);
      boxChanged = true;
    }
    return { job: updated!, applied, boxChanged };
  });
  if (outcome.applied.length > 0) {
    if (isFinalJobStatus(outcome.job.status)) {
      ctx.metrics.jobsFinished.inc({ action: outcome.job.action, status: outcome.job.status });
    }
    await publishJobAndBox(ctx, outcome.job);
  }
  return { applied: outcome.applied.length, lastSeq: outcome.job.lastSeq };
}

/** Records on the box what its job ended with, read from the typed outcome. */
async function settleBox(tx: Db, boxId: string, outcome: JobOutcome, now: Date): Promise<void> {
  const set = (values: Partial<typeof boxes.$inferInsert>) =>
    tx
      .update(boxes)
      .set({ updatedAt: now, ...values })
      .where(eq(boxes.id, boxId));
  if (!outcome.ok) {
    if (!isBoxAction(outcome.action)) return;
    if (outcome.boxRunning) {
      // Its agent keeps the guest running and routed: so is the box, saying what failed. Its
      // idle timer starts again, so an idle hibernate is tried again after a whole timeout,
      // not on the reaper's next pass.
      const statusReason = `${outcome.action} failed: ${outcome.error}`.slice(0, 4000);
      await set({
        status: "running",
        desiredState: "running",
        statusReason,
        errorCode: outcome.code,
        lastActiveAt: now,
      });
      return;
    }
    await set({ status: "error", statusReason: outcome.error, errorCode: outcome.code });
    return;
  }
  switch (outcome.action) {
    case "delete":
      await set({ ...settled(outcome.action), deletedAt: now, ip: null });
      return;
    case "create":
    case "start":
    case "reset":
      // Idle time counts from the moment it runs again, not from before it was stopped.
      await set({
        ...settled(outcome.action),
        ip: outcome.data.ip,
        memoryFileBytes: null,
        lastActiveAt: now,
      });
      return;
    case "stop":
      await set({ ...settled(outcome.action), ip: outcome.data.ip, memoryFileBytes: null });
      return;
    case "hibernate":
      // No memory was there to keep (its VMM had exited): stopped, and the box says why.
      if (outcome.data.memoryLost) {
        await set({
          ...settled("stop"),
          statusReason: outcome.data.memoryLost,
          ip: outcome.data.ip,
          memoryFileBytes: null,
        });
        return;
      }
      await set({
        ...settled(outcome.action),
        ip: outcome.data.ip,
        memoryFileBytes: outcome.data.memoryFileBytes,
      });
      return;
    case "build_golden":
    case "build_image":
      return; // template jobs have no box
  }
}

const settled = (action: BoxAction) => ({
  status: SETTLED_STATUS[action],
  statusReason: null,
  errorCode: null,
});

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
    const code: ProtocolJobErrorCode = job.status === "delivered" ? "not_acknowledged" : "lease_expired";
    const changed = await ctx.db.transaction(async (tx) => {
      const rows = await tx
        .update(agentJobs)
        .set(
          retry
            ? { status: "pending", leaseExpiresAt: null }
            : { status: "failed", error: reason, errorCode: code, finishedAt: now, leaseExpiresAt: null },
        )
        .where(
          and(eq(agentJobs.id, job.id), eq(agentJobs.status, job.status), lt(agentJobs.leaseExpiresAt, now)),
        )
        .returning();
      if (rows.length > 0 && !retry && job.boxId) {
        await tx
          .update(boxes)
          .set({ status: "error", statusReason: reason, errorCode: code, updatedAt: now })
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
