import type { StepName } from "@doppio/contracts";
import type { Logger } from "pino";
import type { Clock } from "../clock.ts";
import { failureMessage } from "../errors.ts";
import type { Metrics } from "../metrics.ts";
import type { NewEvent } from "../store/jobs.ts";
import type { StepReporter } from "../vmm/executor.ts";

const DETAIL_MAX = 2000;
const LOG_MAX = 8000;

/**
 * Times every step and turns it into `step running` → `step succeeded|failed` events. The
 * events go wherever `emit` puts them: the outbox for control-plane jobs, the log for local
 * reconcile actions.
 */
export class JobReporter implements StepReporter {
  constructor(
    private readonly emit: (event: NewEvent) => void,
    private readonly clock: Clock,
    private readonly metrics: Metrics,
    private readonly logger: Logger,
  ) {}

  async step<T>(name: StepName, fn: () => Promise<T>, note?: (value: T) => string | undefined): Promise<T> {
    const started = this.clock.now();
    this.emit({ type: "step", at: started.toISOString(), name, status: "running" });
    try {
      const value = await fn();
      this.#finish(name, started, "succeeded", note?.(value));
      return value;
    } catch (err) {
      this.#finish(name, started, "failed", failureMessage(err));
      throw err;
    }
  }

  log(line: string): void {
    this.emit({ type: "log", at: this.clock.now().toISOString(), line: line.slice(0, LOG_MAX) });
  }

  #finish(name: StepName, started: Date, status: "succeeded" | "failed", detail?: string): void {
    const ended = this.clock.now();
    const ms = ended.getTime() - started.getTime();
    this.metrics.stepDuration.observe({ step: name, outcome: status }, ms / 1000);
    // The step's start and end times carry its duration; the detail is kept for what went
    // wrong, or for what a succeeded step found that changes the job's outcome.
    this.emit({
      type: "step",
      at: ended.toISOString(),
      name,
      status,
      ...(detail ? { detail: detail.slice(0, DETAIL_MAX) } : {}),
    });
    this.logger.debug({ step: name, status, ms }, "step finished");
  }
}

/** Reporter for work that belongs to no job (reconcile): steps are only logged and timed. */
export function logOnlyReporter(clock: Clock, metrics: Metrics, log: Logger): JobReporter {
  return new JobReporter(
    (e) => {
      if (e.type === "log") log.info({ line: e.line }, "executor log");
    },
    clock,
    metrics,
    log,
  );
}
