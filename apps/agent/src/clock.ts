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

/** Exponential backoff: 200 ms doubling per failure, capped (the brief asks for about 5 s). */
export function backoffMs(failures: number, capMs = 5_000, baseMs = 200): number {
  if (failures <= 0) return 0;
  return Math.min(capMs, baseMs * 2 ** Math.min(failures - 1, 20));
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
