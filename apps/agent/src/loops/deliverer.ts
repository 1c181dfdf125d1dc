import type { Logger } from "pino";
import { backoffMs, type Clock } from "../clock.ts";
import { type ControlPlane, rejectedStatus } from "../control-plane.ts";
import type { Metrics } from "../metrics.ts";
import type { JobStore } from "../store/jobs.ts";
import { BackgroundLoop } from "./background-loop.ts";

const BATCH = 500; // JobEventsRequest max
const IDLE_RECHECK_MS = 5_000;

/**
 * Sends outbox rows to the control plane, per job in sequence order, one request in flight
 * per job, retrying with exponential backoff (capped ~5 s) until the control plane answers
 * 200; rows up to the returned lastSeq are then marked delivered. A 404/400 (job unknown to
 * the control plane, or a body it will never take) or a job the control plane has closed
 * would otherwise be retried forever: those rows are set aside and logged.
 */
/** Finished, delivered jobs stay in the agent's store this long (for `/vms` and debugging). */
const JOB_RETENTION_MS = 24 * 3600_000;
const PRUNE_EVERY_MS = 60_000;

export class Deliverer extends BackgroundLoop {
  readonly #failures = new Map<string, number>();
  readonly #notBefore = new Map<string, number>();
  #prunedAt = 0;

  constructor(
    private readonly d: { store: JobStore; cp: ControlPlane; clock: Clock; log: Logger; metrics: Metrics },
  ) {
    super();
  }

  /** One pass over every job with undelivered events; returns how many rows were confirmed. */
  async deliverOnce(): Promise<number> {
    // Nothing reaches the control plane before it is on this host's disk.
    this.d.store.sync();
    const pending = this.d.store.pending(BATCH);
    const now = this.d.clock.now().getTime();
    const due = [...pending].filter(([jobId]) => (this.#notBefore.get(jobId) ?? 0) <= now);
    const counts = await Promise.all(due.map(([jobId, rows]) => this.#deliverJob(jobId, rows)));
    this.d.metrics.outboxBacklog.set(this.d.store.backlog());
    this.#prune(now);
    return counts.reduce((a, b) => a + b, 0);
  }

  /** At most once a minute: delivered jobs older than the retention leave the SQLite store. */
  #prune(now: number): void {
    if (now - this.#prunedAt < PRUNE_EVERY_MS) return;
    this.#prunedAt = now;
    const removed = this.d.store.prune(new Date(now - JOB_RETENTION_MS).toISOString());
    if (removed > 0) this.d.log.debug({ removed }, "pruned delivered jobs");
  }

  async #deliverJob(
    jobId: string,
    rows: ReturnType<JobStore["pending"]> extends Map<string, infer R> ? R : never,
  ) {
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
      const wait = backoffMs(failures);
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
      try {
        confirmed = await this.deliverOnce();
      } catch (err) {
        this.d.log.error({ err }, "deliverer pass failed");
      }
      const now = this.d.clock.now().getTime();
      const next = Math.min(
        IDLE_RECHECK_MS,
        ...[...this.#notBefore.values()].map((t) => Math.max(0, t - now)),
      );
      const backlog = this.d.store.backlog();
      // With rows waiting and none backing off, go again at once; else sleep until the earliest retry.
      const wait = backlog > 0 && this.#notBefore.size === 0 ? (confirmed > 0 ? 0 : 200) : next;
      await this.wakeup.wait(wait, signal);
    }
  }
}
