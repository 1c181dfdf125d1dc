import type { Logger } from "pino";
import type { StepReporter } from "../executor.ts";
import { QemuError, VmmExitedError } from "./errors.ts";

/** Launches of one box action in all (the first and its relaunches) when VMMs keep exiting. */
export const LAUNCH_ATTEMPTS = 2;

/**
 * Runs `launch`; when its VMM exited before the guest was ready, `undo` removes what that
 * launch left (the caller's own failure cleanup) and it launches again, at most `attempts`
 * times in all. Every other failure is undone and thrown as it is: a guest that stays
 * silent while its VMM runs is not helped by a second boot. Runs under the box's lock, and
 * box jobs and reconcile share one queue per box (jobs/runner.ts), so nothing else launches
 * the box between two attempts.
 */
export async function launchWithRelaunch<T>(o: {
  slug: string;
  report: StepReporter;
  log: Logger;
  launch: (attempt: number) => Promise<T>;
  undo: (err: unknown) => Promise<void>;
  attempts?: number;
}): Promise<T> {
  const attempts = o.attempts ?? LAUNCH_ATTEMPTS;
  for (let attempt = 1; ; attempt++) {
    try {
      return await o.launch(attempt);
    } catch (err) {
      await o.undo(err);
      if (!(err instanceof VmmExitedError)) throw err;
      if (attempt >= attempts) {
        // A plain QemuError: an outer action (a reset's create) does not start its own round.
        throw new QemuError(
          "guest_not_ready",
          `the VMM exited before the guest was ready, in each of ${attempts} attempts (the last: ${err.message})`,
          { cause: err },
        );
      }
      o.log.warn(
        { slug: o.slug, attempt, attempts, err },
        "VMM exited before its guest was ready; relaunching",
      );
      o.report.log(
        `the VMM exited before the guest was ready (attempt ${attempt} of ${attempts}: ${err.message}); its leftovers are removed and it is launched again`,
      );
    }
  }
}
