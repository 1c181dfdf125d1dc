import { open, stat } from "node:fs/promises";
import type { Logger } from "pino";
import { birthEpoch, ROTATED_SUFFIX, type Rotation, readEpoch, rotateSerialLog } from "./rotate.ts";
import { type SerialLine, splitSerialLines } from "./serial-lines.ts";

/** Bytes read from one serial log per round: bounds a batch (and memory) when a box floods. */
export const READ_MAX = 256 * 1024;

interface BoxLog {
  path: string;
  birth: number;
  epoch: number;
  /** The previous epoch's newest bytes, in `<log>.1` since the last rotation. */
  rotated: (Rotation & { from: number }) | null;
  /** Reads and rotations of one box's log take turns (a promise chain). */
  lock: Promise<unknown>;
}

export type Chunk = { lines: SerialLine[]; from: number; end: number } | "gone";

/**
 * The boxes' serial logs as the shipper sees them: each log's epoch, reads by (epoch,
 * offset) and the cap. A rotation may happen at any time (a write wakes it, independent of
 * how slow shipping is), so every read names the epoch it wants and is served from the log
 * itself, from the rotated copy if that epoch was just rotated away, or not at all.
 */
export class SerialFiles {
  readonly #boxes = new Map<string, BoxLog>();

  constructor(
    private readonly maxBytes: number,
    private readonly now: () => number,
    private readonly log: Logger,
  ) {}

  forget(keep: ReadonlySet<string>): void {
    for (const slug of this.#boxes.keys()) if (!keep.has(slug)) this.#boxes.delete(slug);
  }

  /** The epoch and size of a box's log now, or null if it does not exist (yet). */
  current(slug: string, path: string): Promise<{ epoch: number; size: number } | null> {
    return this.#locked(slug, path, async (box) => {
      const st = await stat(path).catch(() => null);
      if (!st) return null;
      await this.#sync(box, slug, path, st.birthtimeMs);
      return { epoch: box.epoch, size: st.size };
    });
  }

  /** The epoch the rotated copy holds, if the box's log was rotated since the agent started. */
  rotatedEpoch(slug: string): number | null {
    return this.#boxes.get(slug)?.rotated?.from ?? null;
  }

  /**
   * Complete lines of `epoch` from log offset `from` (at most READ_MAX bytes). `from` moves
   * up if those bytes were rotated away before they were read; "gone" if the epoch is older
   * than anything kept.
   */
  read(slug: string, path: string, epoch: number, from: number): Promise<Chunk> {
    return this.#locked(slug, path, async (box) => {
      if (epoch === box.epoch) {
        const size = await stat(path).then(
          (s) => s.size,
          () => 0,
        );
        return readLines(path, from, 0, size);
      }
      const r = box.rotated;
      if (r?.from !== epoch) return "gone";
      return readLines(`${path}${ROTATED_SUFFIX}`, Math.max(from, r.base), r.base, r.end);
    });
  }

  /** Rotates a box's log if it is over the cap; true if it did. */
  cap(slug: string, path: string): Promise<boolean> {
    return this.#locked(slug, path, async (box) => {
      const st = await stat(path).catch(() => null);
      if (!st || st.size <= this.maxBytes) return false;
      await this.#sync(box, slug, path, st.birthtimeMs);
      const from = box.epoch;
      const r = await rotateSerialLog(path, {
        birthtimeMs: st.birthtimeMs,
        epoch: from,
        keepBytes: this.maxBytes,
        nowMs: this.now(),
      });
      box.rotated = { ...r, from };
      box.epoch = r.epoch;
      this.log.info({ slug, bytes: r.end, kept: r.end - r.base, epoch: r.epoch }, "serial log rotated");
      return true;
    });
  }

  /** Picks up a re-created file (new creation time) or, on first sight, a rotation's sidecar. */
  async #sync(box: BoxLog, slug: string, path: string, birthtimeMs: number): Promise<void> {
    const birth = birthEpoch(birthtimeMs);
    if (box.birth === birth && box.path === path) return;
    box.path = path;
    box.birth = birth;
    box.epoch = await readEpoch(path, birthtimeMs);
    box.rotated = null;
    this.log.debug({ slug, epoch: box.epoch }, "following serial log");
  }

  #locked<T>(slug: string, path: string, fn: (box: BoxLog) => Promise<T>): Promise<T> {
    let box = this.#boxes.get(slug);
    if (!box) {
      box = { path, birth: -1, epoch: 0, rotated: null, lock: Promise.resolve() };
      this.#boxes.set(slug, box);
    }
    const b = box;
    const run = b.lock.then(() => fn(b));
    b.lock = run.catch(() => undefined);
    return run;
  }
}

/** Lines of log offsets `[from, min(from + READ_MAX, size))` from `path`, whose byte 0 is offset `base`. */
async function readLines(path: string, from: number, base: number, size: number): Promise<Chunk> {
  const length = Math.min(READ_MAX, size - from);
  if (length <= 0) return { lines: [], from, end: from };
  const fh = await open(path, "r");
  try {
    const buf = Buffer.alloc(length);
    const { bytesRead } = await fh.read(buf, 0, length, from - base);
    return { from, ...splitSerialLines(buf.subarray(0, bytesRead), from, bytesRead === READ_MAX) };
  } finally {
    await fh.close();
  }
}
