import { type FSWatcher, watch } from "node:fs";

/**
 * inotify watches on the followed serial logs: a write wakes the shipper at once instead of
 * at its next poll. Writes within `settleMs` of each other coalesce into one wake, so a
 * burst of output ships as one batch rather than one request per line.
 */
export class ChangeWatchers {
  readonly #watchers = new Map<string, FSWatcher>();
  #timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly onChange: () => void,
    private readonly settleMs = 20,
  ) {}

  /** Watches exactly `paths` (those that exist; the poll covers the rest until they do). */
  sync(paths: Iterable<string>): void {
    const want = new Set(paths);
    for (const p of this.#watchers.keys()) if (!want.has(p)) this.#drop(p);
    for (const p of want) {
      if (this.#watchers.has(p)) continue;
      try {
        const w = watch(p, { persistent: false }, (event) => {
          if (event === "rename") this.#drop(p); // removed or replaced: watched again next sync
          this.#changed();
        });
        w.on("error", () => this.#drop(p));
        this.#watchers.set(p, w);
      } catch {
        // Not there yet.
      }
    }
  }

  close(): void {
    for (const p of [...this.#watchers.keys()]) this.#drop(p);
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
  }

  #changed(): void {
    this.#timer ??= setTimeout(() => {
      this.#timer = null;
      this.onChange();
    }, this.settleMs);
  }

  #drop(path: string): void {
    this.#watchers.get(path)?.close();
    this.#watchers.delete(path);
  }
}
