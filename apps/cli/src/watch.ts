import { FINAL_JOB_STATUSES, type Job } from "@doppio/contracts";
import type { ApiClient } from "./api.ts";
import type { Io } from "./io.ts";

export interface WatchHandlers {
  onJob(job: Job): void;
  /** A poll failed (the event stream's failures only fall back to polling). */
  onPollError(err: unknown): void;
}

/**
 * Follows a box's jobs: the event stream is the fast path; a poll of
 * `/boxes/:slug/jobs` runs when the stream connects (closing the gap between the
 * action's response and the subscription) and every `pollMs`, so a proxy that buffers or
 * drops the stream only makes updates slower. Runs until `signal` aborts.
 */
export async function watchBoxJobs(
  api: ApiClient,
  io: Io,
  slug: string,
  handlers: WatchHandlers,
  signal: AbortSignal,
): Promise<void> {
  const poll = async () => {
    try {
      for (const job of await api.jobs(slug)) handlers.onJob(job);
    } catch (err) {
      if (!signal.aborted) handlers.onPollError(err);
    }
  };

  const streamLoop = async () => {
    while (!signal.aborted) {
      try {
        for await (const ev of api.sdk.stream("streamEvents", {}, { signal })) {
          if (ev.event === "job" && ev.data.box === slug) handlers.onJob(ev.data);
        }
      } catch {
        // Stream refused or dropped: polling carries on; reconnect after a pause.
      }
      await sleep(io.settings.pollMs, signal);
    }
  };

  const pollLoop = async () => {
    // The first poll runs right away: the stream may connect after the job already moved.
    while (!signal.aborted) {
      await poll();
      await sleep(io.settings.pollMs, signal);
    }
  };

  await Promise.all([streamLoop(), pollLoop()]);
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}

export const isFinalJob = (job: Job) => FINAL_JOB_STATUSES.includes(job.status);

const STATUS_RANK = { pending: 0, delivered: 1, running: 2, succeeded: 3, failed: 3 } as const;

/** Whether `next` is at least as far along as `prev` (updates may arrive out of order). */
export function isNewer(prev: Job, next: Job): boolean {
  const a = STATUS_RANK[prev.status];
  const b = STATUS_RANK[next.status];
  if (a !== b) return b > a;
  if (a === 3) return false;
  const done = (j: Job) => j.steps.filter((s) => s.status !== "running").length;
  if (next.steps.length !== prev.steps.length) return next.steps.length > prev.steps.length;
  return done(next) > done(prev);
}
