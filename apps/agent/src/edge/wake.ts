import type { Logger } from "pino";

/**
 * Asks the control plane to resume hibernated boxes that allowed requests reached (the
 * edge's decide.ts says which). Rate limited on this host: one ask per box per
 * `perBoxMs` while the page reloads, and at most `maxPerWindow` asks per window for all
 * boxes, so a flood of requests never turns into a flood of calls. The control plane
 * checks again (the box's state, its own limits) and queues one `start` job at most.
 */
export class Waker {
  readonly #lastAsk = new Map<string, number>();
  #window: { start: number; count: number } = { start: 0, count: 0 };

  constructor(
    private readonly d: {
      ask: (slug: string) => Promise<void>;
      now: () => number;
      log: Logger;
      perBoxMs?: number;
      windowMs?: number;
      maxPerWindow?: number;
    },
  ) {}

  /** True if an ask was sent now (false: rate limited). Never throws; failures are logged. */
  wake(slug: string): boolean {
    const now = this.d.now();
    const last = this.#lastAsk.get(slug);
    if (last !== undefined && now - last < (this.d.perBoxMs ?? 10_000)) return false;
    const windowMs = this.d.windowMs ?? 10_000;
    if (now - this.#window.start >= windowMs) this.#window = { start: now, count: 0 };
    if (this.#window.count >= (this.d.maxPerWindow ?? 20)) return false;
    this.#window.count++;
    this.#lastAsk.set(slug, now);
    if (this.#lastAsk.size > 10_000) this.#prune(now);
    this.d.ask(slug).then(
      () => this.d.log.info({ box: slug }, "asked the control plane to wake a hibernated box"),
      (err: unknown) => this.d.log.warn({ err, box: slug }, "waking a hibernated box failed"),
    );
    return true;
  }

  #prune(now: number): void {
    for (const [slug, at] of this.#lastAsk) {
      if (now - at >= (this.d.perBoxMs ?? 10_000)) this.#lastAsk.delete(slug);
    }
  }
}
