import { type Job, STEP_LABELS } from "@doppio/contracts";
import { type ApiClient, ApiError } from "./api.ts";
import { CliError } from "./errors.ts";
import type { Io } from "./io.ts";
import { clockTime, formatDuration, shortId } from "./output.ts";
import { isFinalJob, isNewer, watchBoxJobs } from "./watch.ts";

/** What the current job is doing, in words. */
export function currentLabel(job: Job): string {
  const running = job.steps.findLast((s) => s.status === "running");
  if (running) return STEP_LABELS[running.name];
  if (job.status === "pending") return "Queued, waiting for the server to pick it up";
  if (job.status === "delivered") return "Handed to the server";
  if (job.status === "succeeded") return "Done";
  if (job.status === "failed") {
    const failedStep = job.steps.findLast((s) => s.status === "failed");
    return failedStep ? `${STEP_LABELS[failedStep.name]} failed` : "Failed";
  }
  const last = job.steps.at(-1);
  return last ? `${STEP_LABELS[last.name]} (done)` : "Started";
}

interface Progress {
  update(job: Job): void;
  tick(): void;
  finish(job: Job): void;
  clear(): void;
}

const SPINNER = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

/** One line redrawn in place on a terminal. */
function ttyProgress(io: Io, title: string, started: number): Progress {
  let job: Job | null = null;
  let frame = 0;
  const columns = () => io.stderr.columns ?? 80;
  const draw = () => {
    const text = `${SPINNER[frame++ % SPINNER.length]} ${title} · ${job ? currentLabel(job) : "Starting"} · ${formatDuration(io.now() - started)}`;
    io.stderr.write(`\r\x1b[2K${text.slice(0, Math.max(10, columns() - 1))}`);
  };
  return {
    update(next) {
      job = next;
      draw();
    },
    tick: draw,
    finish(final) {
      const mark = final.status === "succeeded" ? "✓" : "✗";
      io.stderr.write(
        `\r\x1b[2K${mark} ${title} · ${currentLabel(final)} · ${formatDuration(io.now() - started)}\n`,
      );
    },
    clear() {
      io.stderr.write("\r\x1b[2K");
    },
  };
}

/** Plain timestamped lines, one per change, for logs and pipes. */
function lineProgress(io: Io, title: string, started: number): Progress {
  let last = "";
  const line = (text: string) => io.stderr.write(`[${clockTime(io.now())}] ${title}: ${text}\n`);
  return {
    update(job) {
      // One line per step started; finished steps and the final state are reported once, by finish().
      if (isFinalJob(job) || (job.status === "running" && !job.steps.some((s) => s.status === "running")))
        return;
      const label = currentLabel(job);
      if (label !== last) line(label);
      last = label;
    },
    tick() {},
    finish(job) {
      line(`${job.status} after ${formatDuration(io.now() - started)}`);
    },
    clear() {},
  };
}

export interface WaitTarget {
  slug: string;
  job: Job;
  /** e.g. "creating brisk-falcon" */
  title: string;
}

/**
 * Waits until the job is final, showing progress on stderr. Ctrl-C stops waiting (the job
 * carries on server-side) and surfaces as an `interrupted` error.
 */
export async function waitForJob(api: ApiClient, io: Io, target: WaitTarget): Promise<Job> {
  const started = io.now();
  const progress = io.stderr.isTTY
    ? ttyProgress(io, target.title, started)
    : lineProgress(io, target.title, started);
  let current = target.job;
  progress.update(current);
  if (isFinalJob(current)) {
    progress.finish(current);
    return current;
  }

  const abort = new AbortController();
  let outcome: { job: Job } | { error: unknown } | null = null;
  const settle = (o: { job: Job } | { error: unknown }) => {
    if (outcome) return;
    outcome = o;
    abort.abort();
  };
  const ticker = setInterval(() => progress.tick(), 100);
  let pollFailures = 0;

  await io.onInterrupt(
    () => settle({ error: interrupted(target) }),
    () =>
      watchBoxJobs(
        api,
        io,
        target.slug,
        {
          onJob(job) {
            if (job.id !== current.id || !isNewer(current, job)) return;
            pollFailures = 0;
            current = job;
            progress.update(job);
            if (isFinalJob(job)) settle({ job });
          },
          onPollError(err) {
            // After a successful delete the box is gone, and so is its job list.
            if (err instanceof ApiError && err.status === 404 && current.action === "delete") {
              settle({
                job: { ...current, status: "succeeded", finishedAt: new Date(io.now()).toISOString() },
              });
            } else if (err instanceof ApiError && err.status !== 404 && err.status < 500) {
              settle({ error: err });
            } else if (++pollFailures >= 20) {
              settle({ error: err });
            }
          },
        },
        abort.signal,
      ),
  );
  clearInterval(ticker);
  const result = outcome as { job: Job } | { error: unknown } | null;
  if (!result || "error" in result) {
    progress.clear();
    throw result ? result.error : new CliError("failed", "stopped waiting for an unknown reason");
  }
  progress.finish(result.job);
  return result.job;
}

function interrupted(target: WaitTarget): CliError {
  return new CliError(
    "interrupted",
    `stopped waiting; the ${target.job.action} job ${shortId(target.job.id)} keeps running on the server`,
    `follow it with: doppio jobs ${target.slug} -f`,
  );
}
