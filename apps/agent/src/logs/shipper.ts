import { LOG_BATCH_MAX, type LogBatch, type LogBatchAck } from "@doppio/contracts";
import type { Logger } from "pino";
import { backoffMs } from "../clock.ts";
import { rejectedStatus } from "../control-plane.ts";
import { BackgroundLoop } from "../loops/background-loop.ts";
import { SERIAL_LOG_MAX_BYTES } from "./rotate.ts";
import { SerialFiles } from "./serial-files.ts";
import { ChangeWatchers } from "./watchers.ts";

export { READ_MAX } from "./serial-files.ts";

export interface LogShipperDeps {
  /** Boxes this host holds. */
  slugs(): string[];
  /** Host path of a box's serial log (the file need not exist yet). */
  serialLog(slug: string): string | null;
  ship(slug: string, batch: LogBatch): Promise<LogBatchAck>;
  now(): Date;
  log: Logger;
  /** A serial log larger than this is rotated (logs/rotate.ts); default SERIAL_LOG_MAX_BYTES. */
  maxLogBytes?: number;
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
 *
 * The same write also checks the log's cap (logs/rotate.ts): a log over `maxLogBytes` is
 * rotated in place under a new epoch, whether or not shipping keeps up or the control plane
 * is reachable (the host's disk comes first). Lines of the old epoch not shipped yet are
 * then read from the rotated copy; only lines more than one cap behind are dropped.
 */
export class LogShipper extends BackgroundLoop {
  readonly #cursors = new Map<string, Cursor>();
  readonly #files: SerialFiles;
  readonly #watchers: ChangeWatchers | null;
  readonly #intervalMs: number;
  #capping: Promise<void> | null = null;

  constructor(
    private readonly d: LogShipperDeps,
    /** `watch: false` polls only (filesystems without inotify; the latency bench's baseline). */
    opts: { intervalMs?: number; watch?: boolean } = {},
  ) {
    super();
    this.#intervalMs = opts.intervalMs ?? 250;
    this.#files = new SerialFiles(d.maxLogBytes ?? SERIAL_LOG_MAX_BYTES, () => d.now().getTime(), d.log);
    this.#watchers =
      opts.watch === false
        ? null
        : new ChangeWatchers(() => {
            this.wake();
            void this.capAll();
          });
  }

  override async stop(): Promise<void> {
    await super.stop();
    this.#watchers?.close();
    await this.#capping;
  }

  /** Rotates every log over its cap; concurrent callers share one sweep. */
  capAll(): Promise<void> {
    this.#capping ??= (async () => {
      try {
        for (const [slug, path] of this.#paths()) await this.#files.cap(slug, path);
      } catch (err) {
        this.d.log.error({ err }, "capping serial logs failed");
      } finally {
        this.#capping = null;
      }
    })();
    return this.#capping;
  }

  /** One pass over every box; returns the lines shipped. Throws if the control plane is unreachable. */
  async shipOnce(): Promise<number> {
    let shipped = 0;
    const paths = this.#paths();
    for (const slug of this.#cursors.keys()) if (!paths.has(slug)) this.#cursors.delete(slug);
    this.#files.forget(new Set(paths.keys()));
    if (!this.stopping) this.#watchers?.sync(paths.values());
    await this.capAll();
    for (const [slug, path] of paths) shipped += await this.#shipBox(slug, path);
    return shipped;
  }

  #paths(): Map<string, string> {
    const paths = new Map<string, string>();
    for (const slug of this.d.slugs()) {
      const path = this.d.serialLog(slug);
      if (path) paths.set(slug, path);
    }
    return paths;
  }

  async #shipBox(slug: string, path: string): Promise<number> {
    const now = await this.#files.current(slug, path);
    if (!now) return 0;
    let shipped = 0;
    // The previous epoch first, while its rest is still in the rotated copy.
    const old = this.#files.rotatedEpoch(slug);
    const cur = this.#cursors.get(slug);
    if (old !== null && old !== now.epoch && (!cur || cur.epoch === old)) {
      shipped += await this.#follow(slug, path, old, Number.MAX_SAFE_INTEGER);
    }
    return shipped + (await this.#follow(slug, path, now.epoch, now.size));
  }

  /**
   * Ships epoch `epoch` of a box's log up to offset `size` (what this pass saw, so one
   * flooding box cannot hold the pass), or only the cursor when the box is unknown.
   */
  async #follow(slug: string, path: string, epoch: number, size: number): Promise<number> {
    let cur = this.#cursors.get(slug);
    if (!cur || cur.epoch !== epoch) {
      const ack = await this.#send(slug, { epoch, end: 0, lines: [] }, size);
      if (!ack) return 0;
      cur = { epoch: ack.epoch, offset: ack.offset };
    }
    let shipped = 0;
    while (cur.offset < size && !this.stopping) {
      const chunk = await this.#files.read(slug, path, epoch, cur.offset);
      if (chunk === "gone" || chunk.end === chunk.from) break; // rotated away, or no complete line yet
      const { lines, end } = chunk;
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
        size,
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
