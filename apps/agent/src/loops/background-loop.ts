import { jittered, Wakeup } from "../clock.ts";
import { retryAfterMs } from "../control-plane.ts";

/** How far each wait of a loop strays from its interval, either way (see `jittered`). */
const INTERVAL_JITTER = 0.1;

/**
 * Start/stop plumbing shared by the agent's background loops: `run` gets a signal that
 * aborts on stop(), stop() waits for the pass in progress, wake() cuts the current wait
 * short. Subclasses write only their pass and their pacing.
 */
export abstract class BackgroundLoop {
  protected readonly wakeup = new Wakeup();
  #abort = new AbortController();
  #loop: Promise<void> | null = null;

  start(): void {
    this.#abort = new AbortController();
    this.#loop ??= this.run(this.#abort.signal);
  }

  async stop(): Promise<void> {
    this.#abort.abort();
    await this.#loop;
    this.#loop = null;
  }

  wake(): void {
    this.wakeup.wake();
  }

  protected get stopping(): boolean {
    return this.#abort.signal.aborted;
  }

  protected abstract run(signal: AbortSignal): Promise<void>;

  /**
   * Runs `pass` every `intervalMs` (±10%) until stopped; after a failure waits `retryMs(failures)`
   * instead, or longer when the control plane's refusal asked for more (Retry-After), and
   * reports it (warn on the first of a run of failures, debug after).
   */
  protected async repeat(
    signal: AbortSignal,
    o: {
      intervalMs: number;
      retryMs: (failures: number) => number;
      pass: () => Promise<unknown>;
      failed: (err: unknown, failures: number) => void;
    },
  ): Promise<void> {
    let failures = 0;
    while (!signal.aborted) {
      let wait = jittered(o.intervalMs, INTERVAL_JITTER);
      try {
        await o.pass();
        failures = 0;
      } catch (err) {
        failures++;
        wait = Math.max(o.retryMs(failures), retryAfterMs(err));
        o.failed(err, failures);
      }
      await this.wakeup.wait(wait, signal);
    }
  }
}
