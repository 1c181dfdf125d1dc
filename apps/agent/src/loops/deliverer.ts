import type { Logger } from "pino";
import { backoffMs, type Clock } from "../clock.ts";
import { type ControlPlane, rejectedStatus, retryAfterMs } from "../control-plane.ts";
import type { Metrics } from "../metrics.ts";
import type { JobStore } from "../store/jobs.ts";
import { BackgroundLoop } from "./background-loop.ts";

const BATCH = 500; // JobEventsRequest max
const IDLE_RECHECK_MS = 5_000;

/** Finished, delivered jobs stay in the agent's store this long (for `/vms` and debugging). */
const JOB_RETENTION_MS = 24 * 3600_000;
const PRUNE_EVERY_MS = 60_000;
/**
 * How long a running job's progress events (acknowledgement, steps, log lines) may wait to
 * go out together. A job's result goes out at once, with whatever waits before it.
 */
const PROGRESS_FLUSH_MS = 250;

type Rows = ReturnType<JobStore["pending"]> extends Map<string, infer R> ? R : never;

/**
 * Sends outbox rows to the control plane, per job in sequence order, one request in flight
 * per job, retrying with exponential backoff (capped ~5 s) until the control plane answers
 * 200; rows up to the returned lastSeq are then marked delivered. A 404/400 (job unknown to
 * the control plane, or a body it will never take) or a job the control plane has closed
 * would otherwise be retried forever: those rows are set aside and logged.
 *
 * The loop batches a running job's progress: its events go out once the oldest has waited
 * `progressFlushMs`, or at once with the job's result. A create's dozen step events then
 * cost the control plane a few requests (each one a transaction and a push to the
 * dashboard) instead of one each, while the job runs; the events carry their own times, so
 * step durations are unchanged, and the dashboard sees progress at most that much later.
 */
export class Deliverer extends BackgroundLoop {
  readonly #failures = new Map<string, number>();
  readonly #notBefore = new Map<string, number>();
  /** Per job: when the loop first saw its progress waiting (held until PROGRESS_FLUSH_MS later). */
  readonly #heldSince = new Map<string, number>();
  #prunedAt = 0;

  constructor(
    private readonly d: {
      store: JobStore;
      cp: ControlPlane;
      clock: Clock;
      log: Logger;
      metrics: Metrics;
      /** Default PROGRESS_FLUSH_MS; 0 sends every event as soon as it is stored. */
      progressFlushMs?: number;
    },
  ) {
    super();
  }

  /** One pass over every job with undelivered events, all sent; returns how many rows were confirmed. */
  deliverOnce(): Promise<number> {
    return this.#pass(false).then((p) => p.confirmed);
  }

  /**
   * Sends what is due: every job's rows, or with `hold`, only those of jobs whose result is
   * stored or whose progress has waited long enough. `heldUntil` is when the next held job
   * falls due (Infinity when none waits).
   */
  async #pass(hold: boolean): Promise<{ confirmed: number; heldUntil: number }> {
    const pending = this.d.store.pending(BATCH);
    const now = this.d.clock.now().getTime();
    const flushMs = this.d.progressFlushMs ?? PROGRESS_FLUSH_MS;
    let heldUntil = Number.POSITIVE_INFINITY;
    for (const jobId of this.#heldSince.keys()) if (!pending.has(jobId)) this.#heldSince.delete(jobId);
    const due = [...pending].filter(([jobId, rows]) => {
      if ((this.#notBefore.get(jobId) ?? 0) > now) return false;
      if (!hold || flushMs <= 0 || rows.length >= BATCH) return true;
      if (rows.some((r) => r.event.type === "result")) return true;
      const since = this.#heldSince.get(jobId) ?? now;
      this.#heldSince.set(jobId, since);
      if (now - since >= flushMs) return true;
      heldUntil = Math.min(heldUntil, since + flushMs);
      return false;
    });
    let confirmed = 0;
    if (due.length > 0) {
      // Nothing reaches the control plane before it is on this host's disk.
      await this.d.store.sync();
      for (const [jobId] of due) this.#heldSince.delete(jobId);
      const counts = await Promise.all(due.map(([jobId, rows]) => this.#deliverJob(jobId, rows)));
      confirmed = counts.reduce((a, b) => a + b, 0);
    }
    this.d.metrics.outboxBacklog.set(this.d.store.backlog());
    this.#prune(now);
    return { confirmed, heldUntil };
  }

  /** At most once a minute: delivered jobs older than the retention leave the SQLite store. */
  #prune(now: number): void {
    if (now - this.#prunedAt < PRUNE_EVERY_MS) return;
    this.#prunedAt = now;
    const removed = this.d.store.prune(new Date(now - JOB_RETENTION_MS).toISOString());
    if (removed > 0) this.d.log.debug({ removed }, "pruned delivered jobs");
  }

  async #deliverJob(jobId: string, rows: Rows) {
    const first = rows[0]!.seq;
    try {
      const res = await this.d.cp.sendEvents(
        jobId,
        rows.map((r) => r.event),
      );
      this.#failures.delete(jobId);
      this.#notBefore.delete(jobId);
      const marked = this.d.store.markDelivered(jobId, res.lastSeq);
      if (res.lastSeq < first) {
        // The control plane took none of them and did not stop at a gap below them: it has
        // closed the job (finished jobs never change), so these events can never apply.
        this.d.log.warn(
          { job: jobId, lastSeq: res.lastSeq, first },
          "control plane closed the job; events set aside",
        );
        this.d.store.markDead(jobId);
      }
      return marked;
    } catch (err) {
      const status = rejectedStatus(err);
      if (status === 404 || status === 400 || status === 422) {
        this.d.log.error({ job: jobId, status, err }, "control plane refuses this job's events; set aside");
        this.d.store.markDead(jobId);
        this.#failures.delete(jobId);
        this.#notBefore.delete(jobId);
        return 0;
      }
      const failures = (this.#failures.get(jobId) ?? 0) + 1;
      this.#failures.set(jobId, failures);
      const wait = Math.max(backoffMs(failures), retryAfterMs(err));
      this.#notBefore.set(jobId, this.d.clock.now().getTime() + wait);
      this.d.metrics.deliveryFailures.inc();
      this.d.log[failures === 1 ? "warn" : "debug"](
        { job: jobId, failures, retryInMs: wait, err },
        "event delivery failed",
      );
      return 0;
    }
  }

  protected async run(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      let confirmed = 0;
      let heldUntil = Number.POSITIVE_INFINITY;
      try {
        ({ confirmed, heldUntil } = await this.#pass(true));
      } catch (err) {
        this.d.log.error({ err }, "deliverer pass failed");
      }
      const now = this.d.clock.now().getTime();
      const next = Math.min(
        IDLE_RECHECK_MS,
        heldUntil - now,
        ...[...this.#notBefore.values()].map((t) => t - now),
      );
      const backlog = this.d.store.backlog();
      // With rows waiting and none backing off or held, go again at once (a job had more than
      // one batch); else sleep until the earliest retry or held job falls due. A new event
      // wakes the loop early (a result goes out at once).
      const waiting = backlog > 0 && this.#notBefore.size === 0 && this.#heldSince.size === 0;
      const wait = waiting ? (confirmed > 0 ? 0 : 200) : Math.max(0, next);
      await this.wakeup.wait(wait, signal);
    }
  }
}
