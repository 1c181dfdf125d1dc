import { setTimeout as delay } from "node:timers/promises";

/** Injected wall clock: event timestamps and durations come from here. */
export interface Clock {
  now(): Date;
}

export const systemClock: Clock = { now: () => new Date() };

/** Resolves after `ms`, or early (without throwing) when `signal` aborts. */
export async function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  if (signal?.aborted) return;
  try {
    await delay(ms, undefined, signal ? { signal } : undefined);
  } catch (err) {
    if ((err as Error).name !== "AbortError") throw err;
  }
}

/**
 * Exponential backoff: 200 ms doubling per failure, capped (the brief asks for about 5 s),
 * each wait drawn from the upper half of that ("equal jitter"). Every host retries against
 * the same control plane: when it comes back from an outage, hosts whose waits were equal
 * would all arrive in the same instant, and the draw spreads them out.
 */
export function backoffMs(failures: number, capMs = 5_000, baseMs = 200, random = Math.random): number {
  if (failures <= 0) return 0;
  const ceiling = Math.min(capMs, baseMs * 2 ** Math.min(failures - 1, 20));
  return ceiling / 2 + (ceiling / 2) * random();
}

/**
 * `ms` moved at random by up to `fraction` of itself either way. A loop that waits exactly
 * its interval keeps the phase it started with, so hosts started (or reconnected) together
 * would keep calling the control plane together; with the draw their phases drift apart.
 */
export function jittered(ms: number, fraction: number, random = Math.random): number {
  return ms * (1 - fraction + 2 * fraction * random());
}

/** A wake-up signal a loop can wait on alongside its timer. */
export class Wakeup {
  #resolve: (() => void) | null = null;
  #pending = false;

  wake(): void {
    this.#pending = true;
    this.#resolve?.();
  }

  /** Waits up to `ms` or until woken (a wake before the wait counts). */
  async wait(ms: number, signal?: AbortSignal): Promise<void> {
    if (this.#pending) {
      this.#pending = false;
      return;
    }
    const ac = new AbortController();
    const onAbort = () => ac.abort();
    signal?.addEventListener("abort", onAbort, { once: true });
    const woken = new Promise<void>((resolve) => {
      this.#resolve = resolve;
    });
    try {
      await Promise.race([sleep(ms, ac.signal), woken]);
    } finally {
      ac.abort();
      signal?.removeEventListener("abort", onAbort);
      this.#resolve = null;
      this.#pending = false;
    }
  }
}
