import { randomBytes } from "node:crypto";
import { readdir, rename, rm } from "node:fs/promises";
import { join } from "node:path";
import type { Logger } from "pino";
import { makeDirs } from "../make-dirs.ts";

/** Makes a fresh formatted volume of `gb` GiB at `path` (disks.ts createVolume). */
type FormatVolume = (path: string, gb: number) => Promise<void>;

export interface VolumePoolOptions {
  /** Where ready volumes wait; must be on the same filesystem as the boxes (a take is a rename). */
  dir: string;
  /** Ready volumes kept per size; 0 turns the pool off (every take misses). */
  perSize: number;
  format: FormatVolume;
  log?: Logger;
}

const READY = /^(\d{1,6})g-[0-9a-f]{16}\.raw$/;
/**
 * After a take that leaves volumes of its size ready, the refill waits this long: its mkfs
 * would otherwise run beside the very create that took the volume (its network setup and
 * VMM restore). A take that empties its size refills at once (the next create would format).
 */
export const REFILL_DELAY_MS = 1_000;

/**
 * Pre-formatted data volumes, a few per size, so a create renames a file instead of
 * running mkfs (a spawn and tens of milliseconds on the create path). A volume is made
 * under a temporary name and renamed to a ready name only once formatted, so after a crash
 * or an agent restart the directory holds only whole volumes (leftovers are deleted by
 * `start`) and the sizes seen before are refilled. A volume leaves the pool once, by
 * rename, to one box; nothing ever goes back into it, so no box's data can reach another.
 */
export class VolumePool {
  readonly #o: VolumePoolOptions;
  /** Ready file names per size; a take removes the name synchronously, before any await. */
  readonly #ready = new Map<number, string[]>();
  readonly #refills = new Map<number, Promise<void>>();
  /** Refills waiting out REFILL_DELAY_MS, per size. */
  readonly #deferred = new Map<number, { timer: NodeJS.Timeout; done: Promise<void>; fire: () => void }>();
  #started: Promise<void> = Promise.resolve();
  #closed = false;

  constructor(o: VolumePoolOptions) {
    this.#o = o;
  }

  /** Adopts the volumes left by an earlier agent, deletes half-made ones, refills every known size. */
  start(sizesGb: readonly number[] = []): Promise<void> {
    this.#started = this.#start(sizesGb);
    return this.#started;
  }

  async #start(sizesGb: readonly number[]): Promise<void> {
    await makeDirs(this.#o.dir);
    for (const name of await readdir(this.#o.dir)) {
      const m = READY.exec(name);
      if (m) this.#list(Number(m[1])).push(name);
      else await rm(join(this.#o.dir, name), { force: true, recursive: true });
    }
    for (const gb of sizesGb) this.#list(gb);
    for (const gb of this.#ready.keys()) this.refill(gb);
  }

  /**
   * Moves a ready volume of `gb` GiB to `dest` and refills behind it (at once when it took
   * the last one, else after REFILL_DELAY_MS); false when none is ready (the caller formats
   * one itself).
   */
  async take(gb: number, dest: string): Promise<boolean> {
    await this.#started.catch(() => undefined);
    const list = this.#list(gb);
    const name = list.shift();
    if (list.length > 0) this.#refillLater(gb);
    else this.refill(gb);
    if (!name) return false;
    try {
      await rename(join(this.#o.dir, name), dest);
      return true;
    } catch (err) {
      this.#o.log?.warn({ err, gb }, "pooled volume could not be taken");
      return false;
    }
  }

  /** Ready volumes per size (GiB → count). */
  counts(): Record<number, number> {
    return Object.fromEntries([...this.#ready].map(([gb, l]) => [gb, l.length]));
  }

  #refillLater(gb: number): void {
    if (this.#closed || this.#o.perSize <= 0 || this.#deferred.has(gb)) return;
    let fire = () => {};
    const done = new Promise<void>((resolve) => {
      fire = () => {
        clearTimeout(timer);
        this.#deferred.delete(gb);
        this.refill(gb);
        resolve();
      };
    });
    const timer = setTimeout(() => fire(), REFILL_DELAY_MS);
    timer.unref();
    this.#deferred.set(gb, { timer, done, fire });
  }

  /** Tops `gb` up to `perSize` in the background, one volume at a time; returns at once. */
  refill(gb: number): void {
    this.#deferred.get(gb)?.fire();
    if (this.#closed || this.#o.perSize <= 0 || this.#refills.has(gb)) return;
    const run = (async () => {
      while (!this.#closed && this.#list(gb).length < this.#o.perSize) {
        const name = `${gb}g-${randomBytes(8).toString("hex")}.raw`;
        const tmp = join(this.#o.dir, `.making-${name}`);
        try {
          await this.#o.format(tmp, gb);
          await rename(tmp, join(this.#o.dir, name));
          this.#list(gb).push(name);
        } catch (err) {
          await rm(tmp, { force: true });
          this.#o.log?.warn({ err, gb }, "volume pool refill failed");
          return;
        }
      }
    })().finally(() => this.#refills.delete(gb));
    this.#refills.set(gb, run);
  }

  /** Waits for running refills (tests, shutdown); later refills do not start. */
  async close(): Promise<void> {
    this.#closed = true;
    for (const d of this.#deferred.values()) d.fire();
    await this.#started.catch(() => undefined);
    await Promise.all(this.#refills.values());
  }

  /** Resolves once no refill is running or waiting to (tests and benches wait for a full pool). */
  async idle(): Promise<void> {
    while (this.#refills.size || this.#deferred.size) {
      await Promise.all([...this.#deferred.values()].map((d) => d.done));
      await Promise.all(this.#refills.values());
    }
  }

  #list(gb: number): string[] {
    let list = this.#ready.get(gb);
    if (!list) {
      list = [];
      this.#ready.set(gb, list);
    }
    return list;
  }
}
