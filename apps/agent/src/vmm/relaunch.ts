import type { Logger } from "pino";
import type { StepReporter } from "./executor.ts";

/** Launches of one box action in all (the first and its relaunches) when VMMs keep exiting. */
export const LAUNCH_ATTEMPTS = 2;

/**
 * Runs `launch`; when its VMM exited before the guest was ready (`exited(err)`), `undo`
 * removes what that launch left (the caller's own failure cleanup) and it launches again,
 * at most `attempts` times in all; then `gaveUp` makes the job's error. Every other failure
 * is undone and thrown as it is: a guest that stays silent while its VMM runs is not helped
 * by a second boot. Callers run it under the box's lock, and box jobs and reconcile share
 * one queue per box (jobs/runner.ts), so nothing else launches the box between attempts.
 */
export async function launchWithRelaunch<T>(o: {
  slug: string;
  report: StepReporter;
  log: Logger;
  launch: (attempt: number) => Promise<T>;
  undo: (err: unknown) => Promise<void>;
  exited: (err: unknown) => boolean;
  /** The final error; never one `exited` accepts, so an outer action does not start its own round. */
  gaveUp: (message: string, last: Error) => Error;
  attempts?: number;
}): Promise<T> {
  const attempts = o.attempts ?? LAUNCH_ATTEMPTS;
  for (let attempt = 1; ; attempt++) {
    try {
      return await o.launch(attempt);
    } catch (err) {
      await o.undo(err);
      if (!o.exited(err)) throw err;
      const message = (err as Error).message;
      if (attempt >= attempts) {
        throw o.gaveUp(
          `the VMM exited before the guest was ready, in each of ${attempts} attempts (the last: ${message})`,
          err as Error,
        );
      }
      o.log.warn(
        { slug: o.slug, attempt, attempts, err },
        "VMM exited before its guest was ready; relaunching",
      );
      o.report.log(
        `the VMM exited before the guest was ready (attempt ${attempt} of ${attempts}: ${message}); its leftovers are removed and it is launched again`,
      );
    }
  }
}
