import { open, stat } from "node:fs/promises";
import { LOG_BATCH_MAX, type LogBatch, type LogBatchAck } from "@doppio/contracts";
import type { Logger } from "pino";
import { backoffMs } from "../clock.ts";
import { rejectedStatus } from "../control-plane.ts";
import { BackgroundLoop } from "../loops/background-loop.ts";
import { splitSerialLines } from "./serial-lines.ts";
import { ChangeWatchers } from "./watchers.ts";

/** Bytes read from one serial log per round: bounds a batch (and memory) when a box floods. */
export const READ_MAX = 256 * 1024;

export interface LogShipperDeps {
  /** Boxes this host holds. */
  slugs(): string[];
  /** Host path of a box's serial log (the file need not exist yet). */
  serialLog(slug: string): string | null;
  ship(slug: string, batch: LogBatch): Promise<LogBatchAck>;
  now(): Date;
  log: Logger;
}

interface Cursor {
  epoch: number;
  offset: number;
}

/**
 * Follows every box's serial log (console + `[svc NAME]` service lines) by byte offset
 * and ships complete lines to the control plane. The control plane's cursor is the truth:
 * a box seen for the first time (or after an agent restart) starts where the control plane
 * stopped, so nothing is lost or sent twice across crashes. A file's epoch is its creation
 * time, so a re-created file starts over (QEMU and Firecracker only ever append to it).
 * A write to a followed file wakes the loop at once (inotify); the poll interval is the
 * fallback for files that appear between passes.
 */
export class LogShipper extends BackgroundLoop {
  readonly #cursors = new Map<string, Cursor>();
  readonly #watchers: ChangeWatchers | null;
  readonly #intervalMs: number;

  constructor(
    private readonly d: LogShipperDeps,
    /** `watch: false` polls only (filesystems without inotify; the latency bench's baseline). */
    opts: { intervalMs?: number; watch?: boolean } = {},
  ) {
    super();
    this.#intervalMs = opts.intervalMs ?? 250;
    this.#watchers = opts.watch === false ? null : new ChangeWatchers(() => this.wake());
  }

  override async stop(): Promise<void> {
    await super.stop();
    this.#watchers?.close();
  }

  /** One pass over every box; returns the lines shipped. Throws if the control plane is unreachable. */
  async shipOnce(): Promise<number> {
    let shipped = 0;
    const slugs = this.d.slugs();
    for (const slug of this.#cursors.keys()) if (!slugs.includes(slug)) this.#cursors.delete(slug);
    const paths = new Map<string, string>();
    for (const slug of slugs) {
      const path = this.d.serialLog(slug);
      if (path) paths.set(slug, path);
    }
    if (!this.stopping) this.#watchers?.sync(paths.values());
    for (const [slug, path] of paths) shipped += await this.#shipBox(slug, path);
    return shipped;
  }

  async #shipBox(slug: string, path: string): Promise<number> {
    const st = await stat(path).catch(() => null);
    if (!st) return 0;
    const epoch = Math.floor(st.birthtimeMs) || 1;
    let cur = this.#cursors.get(slug);
    if (!cur || cur.epoch !== epoch) {
      const ack = await this.#send(slug, { epoch, end: 0, lines: [] }, st.size);
      if (!ack) return 0;
      cur = { epoch: ack.epoch, offset: ack.offset };
    }
    let shipped = 0;
    while (cur.offset < st.size && !this.stopping) {
      const { lines, end } = await readLines(path, cur.offset, Math.min(READ_MAX, st.size - cur.offset));
      if (end === cur.offset) break; // only a partial line so far
      const batch = lines.slice(0, LOG_BATCH_MAX);
      const batchEnd = lines.length > LOG_BATCH_MAX ? lines[LOG_BATCH_MAX]!.offset : end;
      const at = this.d.now().toISOString();
      const ack = await this.#send(
        slug,
        {
          epoch,
          end: batchEnd,
          lines: batch.map((l) => ({ offset: l.offset, at, source: l.source, text: l.text })),
        },
        st.size,
      );
      if (!ack) return shipped;
      shipped += ack.stored;
      if (ack.offset <= cur.offset) break; // the control plane holds a newer file: wait for it
      cur = { epoch: ack.epoch, offset: ack.offset };
    }
    return shipped;
  }

  /**
   * Ships one batch and records the cursor it leads to. A box the control plane does not
   * know (deleted, never placed here) is skipped to the end of its file; null then.
   */
  async #send(slug: string, batch: LogBatch, size: number): Promise<(Cursor & { stored: number }) | null> {
    try {
      const ack = await this.d.ship(slug, batch);
      // A newer file on the control plane's side: this one is history.
      const cur =
        ack.epoch === batch.epoch
          ? { epoch: ack.epoch, offset: ack.offset }
          : { epoch: batch.epoch, offset: size };
      this.#cursors.set(slug, cur);
      return { ...cur, stored: ack.stored };
    } catch (err) {
      if (rejectedStatus(err) !== 404) throw err;
      this.d.log.debug({ slug }, "control plane does not know this box; its log is skipped");
      this.#cursors.set(slug, { epoch: batch.epoch, offset: size });
      return null;
    }
  }

  protected run(signal: AbortSignal): Promise<void> {
    return this.repeat(signal, {
      intervalMs: this.#intervalMs,
      // A control plane that is down is asked again with backoff, not four times a second.
      retryMs: (failures) => Math.max(this.#intervalMs, backoffMs(failures)),
      pass: () => this.shipOnce(),
      failed: (err, failures) =>
        this.d.log[failures === 1 ? "warn" : "debug"]({ err, failures }, "shipping box logs failed"),
    });
  }
}

async function readLines(path: string, from: number, length: number) {
  const fh = await open(path, "r");
  try {
    const buf = Buffer.alloc(length);
    const { bytesRead } = await fh.read(buf, 0, length, from);
    return splitSerialLines(buf.subarray(0, bytesRead), from, bytesRead === READ_MAX);
  } finally {
    await fh.close();
  }
}
