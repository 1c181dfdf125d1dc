import { JobErrorCode, type ProtocolJobErrorCode, parseJobResult } from "@doppio/contracts";
import type { Logger } from "pino";
import type { Clock } from "../clock.ts";
import { type AgentErrorCode, failureMessage, ranOn } from "../errors.ts";
import type { Metrics } from "../metrics.ts";
import type { JobStore, StoredJob } from "../store/jobs.ts";
import { type HandlerDeps, type Registry, type ResolvedJob, resolveJob } from "./registry.ts";
import { JobReporter } from "./reporter.ts";

export interface RunnerDeps {
  store: JobStore;
  registry: Registry;
  handlers: HandlerDeps;
  clock: Clock;
  log: Logger;
  metrics: Metrics;
  concurrency: number;
  /** Called after every stored event (wakes the deliverer). */
  onEvent: () => void;
  /** Called when a job has its result (e.g. a golden build: heartbeat now). */
  onFinished?: (job: StoredJob, ok: boolean) => void;
}

/**
 * Runs stored jobs: different boxes in parallel up to `concurrency`, one box's jobs strictly
 * in the order they arrived (a per-key promise chain). Reconcile work joins the same chains,
 * so it never races a job for the same box.
 */
export class JobRunner {
  readonly #d: RunnerDeps;
  readonly #held = new Map<string, StoredJob>();
  readonly #chains = new Map<string, Promise<void>>();
  readonly #busyKeys = new Map<string, number>();
  #running = 0;
  #slotWaiters: Array<() => void> = [];
  #stopping = false;
  /** Consecutive times a job could not be recorded because the store's disk is full. */
  #storeFull = 0;
  #retryTimer: NodeJS.Timeout | null = null;

  constructor(deps: RunnerDeps) {
    this.#d = deps;
  }

  /** How many more jobs the claim loop may take now: none while the store cannot record them. */
  freeSlots(): number {
    if (this.#storeFull > 0) return 0;
    return Math.max(0, this.#d.concurrency - this.#held.size);
  }

  /** True while the store's disk was full at the last write a job needed (jobs wait, see #execute). */
  storeFull(): boolean {
    return this.#storeFull > 0;
  }

  /** The claim loop could not store a job it was handed: take no more until the store writes again. */
  noteStoreFull(): void {
    this.#storeFull = Math.max(this.#storeFull, 1);
    this.#d.metrics.storeFull.set(1);
    this.#scheduleStoreProbe();
  }

  heldCount(): number {
    return this.#held.size;
  }

  /** Resolves when a slot frees up (or immediately if one is free). */
  waitForSlot(signal?: AbortSignal): Promise<void> {
    if (this.freeSlots() > 0 || signal?.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      // The loop's signal lives as long as the agent: a wait that ends on a free slot must
      // take its listener off again, or every full-slots wait leaves one behind.
      const done = () => {
        signal?.removeEventListener("abort", done);
        resolve();
      };
      this.#slotWaiters.push(done);
      signal?.addEventListener("abort", done, { once: true });
    });
  }

  /** True while any job or reconcile action for this box is queued or running. */
  busy(slug: string): boolean {
    return (this.#busyKeys.get(slug) ?? 0) > 0;
  }

  /** True while a job of this action is queued or running. */
  holds(action: string): boolean {
    for (const j of this.#held.values()) if (j.action === action) return true;
    return false;
  }

  enqueue(job: StoredJob): void {
    if (this.#held.has(job.id) || this.#stopping) return;
    this.#held.set(job.id, job);
    this.#d.metrics.jobsHeld.set(this.#held.size);
    void this.#serialize(keyOf(job), () => this.#execute(job)).finally(() => {
      this.#held.delete(job.id);
      this.#d.metrics.jobsHeld.set(this.#held.size);
      const waiters = this.#slotWaiters;
      this.#slotWaiters = [];
      for (const w of waiters) w();
    });
  }

  /** Runs `fn` in the box's chain (after its queued jobs); used by reconcile. */
  runForBox<T>(slug: string, fn: () => Promise<T>): Promise<T> {
    return this.#serialize(slug, fn);
  }

  /** Stop taking jobs and wait (bounded) for the running ones; unfinished ones resume next start. */
  async stop(timeoutMs: number): Promise<void> {
    this.#stopping = true;
    if (this.#retryTimer) clearTimeout(this.#retryTimer);
    const all = Promise.allSettled([...this.#chains.values()]);
    await Promise.race([all, new Promise((r) => setTimeout(r, timeoutMs).unref())]);
  }

  /** Resolves when nothing is queued or running (tests). */
  async idle(): Promise<void> {
    while (this.#chains.size > 0) await Promise.allSettled([...this.#chains.values()]);
  }

  #serialize<T>(key: string, fn: () => Promise<T>): Promise<T> {
    this.#busyKeys.set(key, (this.#busyKeys.get(key) ?? 0) + 1);
    const prev = this.#chains.get(key) ?? Promise.resolve();
    const run = prev.then(() => this.#withSlot(fn));
    const tail = run.then(
      () => undefined,
      () => undefined,
    );
    this.#chains.set(key, tail);
    void tail.then(() => {
      const n = (this.#busyKeys.get(key) ?? 1) - 1;
      if (n <= 0) this.#busyKeys.delete(key);
      else this.#busyKeys.set(key, n);
      if (this.#chains.get(key) === tail) this.#chains.delete(key);
    });
    return run;
  }

  async #withSlot<T>(fn: () => Promise<T>): Promise<T> {
    while (this.#running >= this.#d.concurrency) {
      await new Promise<void>((resolve) => this.#slotWaiters.push(resolve));
    }
    this.#running++;
    try {
      return await fn();
    } finally {
      this.#running--;
      const waiters = this.#slotWaiters;
      this.#slotWaiters = [];
      for (const w of waiters) w();
    }
  }

  /**
   * Runs the job and records its result. If the store cannot record it because the disk is
   * full (SQLITE_FULL: the job could not be marked running, or its result not written), the
   * job stays unfinished in the store, exactly as after an agent crash: it is held and run
   * again from the start once the store writes again (handlers and executors are idempotent),
   * and the claim loop takes no new job meanwhile, so later jobs wait at the control plane.
   * Any other store failure propagates as before.
   */
  async #execute(job: StoredJob): Promise<void> {
    for (;;) {
      try {
        await this.#executeOnce(job);
        if (this.#storeFull > 0) {
          this.#storeFull = 0;
          this.#d.metrics.storeFull.set(0);
          this.#d.log.warn("the agent's store writes again; jobs resume");
        }
        return;
      } catch (err) {
        if (!noSpaceLeft(err) || this.#stopping) {
          if (this.#stopping) return;
          throw err;
        }
        this.#storeFull++;
        this.#d.metrics.storeFull.set(1);
        this.#d.log.error(
          { job: job.id, action: job.action, box: job.box, err },
          "the agent's store is full (no space left on its disk): the job waits and runs again once it writes",
        );
        // Until the store's filesystem has room again (no handler runs meanwhile).
        for (let tries = 0; ; tries++) {
          const waitMs = Math.min(30_000, 500 * 2 ** Math.min(tries, 6));
          await new Promise<void>((resolve) => {
            this.#retryTimer = setTimeout(resolve, waitMs);
          });
          this.#retryTimer = null;
          if (this.#stopping) return;
          if (this.#writable()) break;
        }
      }
    }
  }

  /** Lets the claim loop take jobs again once a small write succeeds (after a failed claim insert). */
  #scheduleStoreProbe(): void {
    if (this.#retryTimer || this.#stopping) return;
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = null;
      if (this.#held.size > 0 || this.#stopping) return; // a held job's retry clears it
      if (!this.#writable()) return this.#scheduleStoreProbe();
      this.#storeFull = 0;
      this.#d.metrics.storeFull.set(0);
      this.#d.log.warn("the agent's store writes again; claiming resumes");
      const waiters = this.#slotWaiters;
      this.#slotWaiters = [];
      for (const w of waiters) w();
    }, 2_000);
  }

  #writable(): boolean {
    try {
      return this.#d.store.hasRoom();
    } catch (err) {
      this.#d.log.debug({ err }, "store room check failed");
      return false;
    }
  }

  async #executeOnce(job: StoredJob): Promise<void> {
    const { store, clock, metrics } = this.#d;
    if (this.#stopping) return;
    const log = this.#d.log.child({ job: job.id, action: job.action, box: job.box });
    const attempt = store.markRunning(job.id);
    const emit = (event: Parameters<JobStore["append"]>[1]) => {
      store.append(job.id, event);
      this.#d.onEvent();
    };
    const report = new JobReporter(emit, clock, metrics, log);
    // Claimed jobs were acknowledged (`started`) on arrival; local jobs are acknowledged here.
    if (job.local && attempt === 1) emit({ type: "started", at: clock.now().toISOString() });
    if (attempt > 1) {
      const why = this.#storeFull > 0 ? "the agent's disk was full" : "an agent restart";
      report.log(`running again after ${why} (attempt ${attempt})`);
    }
    const started = clock.now().getTime();
    const result = await this.#run(job, attempt, report);
    if (!result.ok) log.warn({ err: result.err, code: result.code }, "job failed");
    store.finish(
      job.id,
      result.ok
        ? { ok: true, data: result.data }
        : {
            ok: false,
            code: result.code,
            error: result.error,
            ...(ranOn(result.err) ? { boxRunning: true } : {}),
          },
      clock.now().toISOString(),
    );
    this.#d.onEvent();
    metrics.jobs.inc({ action: job.action, outcome: result.ok ? "succeeded" : "failed" });
    this.#d.onFinished?.(job, result.ok);
    log.info({ ok: result.ok, attempt, ms: clock.now().getTime() - started }, "job finished");
  }

  /**
   * Runs the job's handler; what it returns goes into the outbox only if it matches the
   * action's result schema, so the control plane never settles a box from a malformed
   * success. A failure carries the code of the error that ended the job.
   */
  async #run(job: StoredJob, attempt: number, report: JobReporter): Promise<Outcome> {
    let resolved: ResolvedJob;
    let data: unknown;
    try {
      resolved = resolveJob(this.#d.registry, job);
      data = await resolved.run(this.#d.handlers, { ...job, attempt }, report);
    } catch (err) {
      const error = failureMessage(err).slice(0, 4000) || `${job.action} failed`;
      return { ok: false, code: errorCode(err), error, err };
    }
    const checked = parseJobResult(resolved.action, { ok: true, data });
    if (checked.ok && checked.outcome.ok) return { ok: true, data: checked.outcome.data };
    const problems = checked.ok ? [] : checked.problems;
    const error = `the ${job.action} handler returned a result that breaks its contract (${problems.join("; ")}); the job is reported failed`;
    return {
      ok: false,
      code: "invalid_result" satisfies ProtocolJobErrorCode,
      error: error.slice(0, 4000),
      err: new Error(error),
    };
  }
}

type Outcome =
  | { ok: true; data: Record<string, unknown> }
  | { ok: false; code: JobErrorCode; error: string; err: unknown };

/**
 * The code a failed job reports: the agent's error classes carry one (CodedError in
 * apps/agent/src/coded-error.ts and its subclasses, AgentError, EdgeError,
 * FirecrackerError). Node's own errors carry upper-case codes (ENOENT) that are not job
 * codes; those and uncoded errors report "internal", except a full filesystem (ENOSPC
 * anywhere in the error's cause chain), which reports "disk_full".
 */
function errorCode(err: unknown): JobErrorCode {
  if (noSpaceLeft(err)) return "disk_full" satisfies AgentErrorCode;
  const code = err instanceof Error && "code" in err ? err.code : undefined;
  return typeof code === "string" && JobErrorCode.safeParse(code).success
    ? code
    : ("internal" satisfies ProtocolJobErrorCode);
}

/**
 * ENOSPC from Node's fs calls, SQLITE_FULL from the agent's own store (better-sqlite3), or a
 * tool's "No space left on device" (qemu-img), at any depth.
 */
export function noSpaceLeft(err: unknown): boolean {
  for (let e = err, depth = 0; e instanceof Error && depth < 8; e = e.cause, depth++) {
    if ("code" in e && (e.code === "ENOSPC" || e.code === "SQLITE_FULL")) return true;
    if (/No space left on device/.test(e.message)) return true;
  }
  return false;
}

/** Jobs of one box share a key; template jobs share one per template; anything else runs alone. */
function keyOf(job: StoredJob): string {
  if (job.box) return job.box;
  const template = (job.payload as { template?: unknown } | null)?.template;
  if (typeof template === "string") return `template:${template}`;
  return `job:${job.id}`;
}
