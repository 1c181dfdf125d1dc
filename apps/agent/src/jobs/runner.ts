import type { Logger } from "pino";
import type { Clock } from "../clock.ts";
import { AgentError, failureMessage } from "../errors.ts";
import type { Metrics } from "../metrics.ts";
import type { JobStore, StoredJob } from "../store/jobs.ts";
import { type HandlerDeps, type Registry, resolveJob } from "./registry.ts";
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

  constructor(deps: RunnerDeps) {
    this.#d = deps;
  }

  /** How many more jobs the claim loop may take now. */
  freeSlots(): number {
    return Math.max(0, this.#d.concurrency - this.#held.size);
  }

  heldCount(): number {
    return this.#held.size;
  }

  /** Resolves when a slot frees up (or immediately if one is free). */
  waitForSlot(signal?: AbortSignal): Promise<void> {
    if (this.freeSlots() > 0 || signal?.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      this.#slotWaiters.push(resolve);
      signal?.addEventListener("abort", () => resolve(), { once: true });
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

  async #execute(job: StoredJob): Promise<void> {
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
    if (attempt > 1) report.log(`running again after an agent restart (attempt ${attempt})`);
    const started = clock.now().getTime();
    let ok = false;
    let error: string | undefined;
    let data: Record<string, unknown> | undefined;
    try {
      const { handler, payload } = resolveJob(this.#d.registry, job);
      data = await handler.run(this.#d.handlers, payload, { ...job, attempt }, report);
      ok = true;
    } catch (err) {
      error = failureMessage(err).slice(0, 4000);
      const code = err instanceof AgentError ? err.code : undefined;
      log.warn({ err, code }, "job failed");
    }
    store.finish(
      job.id,
      ok ? { ok, ...(data ? { data } : {}) } : { ok, ...(error ? { error } : {}) },
      clock.now().toISOString(),
    );
    this.#d.onEvent();
    metrics.jobs.inc({ action: job.action, outcome: ok ? "succeeded" : "failed" });
    this.#d.onFinished?.(job, ok);
    log.info({ ok, attempt, ms: clock.now().getTime() - started }, "job finished");
  }
}

/** Jobs of one box share a key; template jobs share one per template; anything else runs alone. */
function keyOf(job: StoredJob): string {
  if (job.box) return job.box;
  const template = (job.payload as { template?: unknown } | null)?.template;
  if (typeof template === "string") return `template:${template}`;
  return `job:${job.id}`;
}
