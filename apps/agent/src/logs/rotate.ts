import { type FileHandle, open, readFile, rename, writeFile } from "node:fs/promises";

/**
 * Capping a box's serial log on the host. The VMM (QEMU `append=on`, Firecracker's
 * `O_APPEND` fd) keeps the file open for the box's life and cannot be told to reopen it, so
 * the file is never renamed: its newest bytes (at most the cap) are copied to `<log>.1` and
 * the file is truncated in place; the VMM's next append lands at offset 0. Disk use per
 * box is therefore at most two caps plus what the box writes between two checks.
 *
 * Truncating restarts byte offsets, so the content gets a new epoch (the control plane's
 * log cursor is per epoch; a higher epoch means "a new file from offset 0"). A file's
 * first epoch is its creation time; later ones are written to `<log>.epoch` *before* the
 * copy and truncate, so a restarted agent continues the right one. An agent that dies in
 * between re-ships at most one cap of lines; what the guest writes between the copy's last
 * look at the file and the truncate (two system calls apart) is lost.
 */

/**
 * Default cap per serial log (agent config `serialLogMaxBytes`): the control plane keeps
 * only a box's newest 5000 lines anyway; the host keeps this, plus as much again in `.1`.
 */
export const SERIAL_LOG_MAX_BYTES = 16 * 1024 * 1024;
export const ROTATED_SUFFIX = ".1";
const EPOCH_SUFFIX = ".epoch";
const COPY_CHUNK = 1024 * 1024;
const CATCH_UP_ROUNDS = 3;

/** The epoch of the log's current content: its creation time, or the one set at its last rotation. */
export async function readEpoch(path: string, birthtimeMs: number): Promise<number> {
  const birth = birthEpoch(birthtimeMs);
  try {
    const saved = JSON.parse(await readFile(`${path}${EPOCH_SUFFIX}`, "utf8")) as {
      birth: number;
      epoch: number;
    };
    // A sidecar from an earlier file at this path (the box was re-created) does not apply.
    if (saved.birth === birth && Number.isSafeInteger(saved.epoch) && saved.epoch > birth) return saved.epoch;
  } catch {
    // no rotation yet (or an unreadable sidecar): the creation time is the epoch
  }
  return birth;
}

export function birthEpoch(birthtimeMs: number): number {
  return Math.floor(birthtimeMs) || 1;
}

export interface Rotation {
  /** Old offsets `[base, end)` are now in `<log>.1`, at `offset - base`. */
  base: number;
  end: number;
  /** The epoch of what the VMM writes from now on (offsets from 0). */
  epoch: number;
}

/**
 * Moves the newest `keepBytes` of the log to `<log>.1` (replacing it) and truncates the log.
 * `epoch` is the current one; the new one is above it and above `nowMs`.
 */
export async function rotateSerialLog(
  path: string,
  opts: { birthtimeMs: number; epoch: number; keepBytes: number; nowMs: number },
): Promise<Rotation> {
  const epoch = Math.max(opts.nowMs, opts.epoch + 1);
  const sidecar = `${path}${EPOCH_SUFFIX}`;
  await writeFile(`${sidecar}.tmp`, JSON.stringify({ birth: birthEpoch(opts.birthtimeMs), epoch }));
  await rename(`${sidecar}.tmp`, sidecar);
  const log = await open(path, "r+");
  try {
    const tmp = `${path}${ROTATED_SUFFIX}.tmp`;
    const out = await open(tmp, "w", 0o640);
    let base = 0;
    let end = 0;
    try {
      const buf = Buffer.alloc(COPY_CHUNK);
      let size = (await log.stat()).size;
      base = end = await lineStart(log, Math.max(0, size - opts.keepBytes), size);
      // Catch up with what the guest writes meanwhile, so the truncate drops as little as
      // possible; a few rounds only, or a flooding guest would keep the copy going.
      for (let round = 0; round < CATCH_UP_ROUNDS && end < size; round++) {
        while (end < size) {
          const { bytesRead } = await log.read(buf, 0, Math.min(COPY_CHUNK, size - end), end);
          if (bytesRead === 0) break;
          await out.write(buf, 0, bytesRead);
          end += bytesRead;
        }
        size = (await log.stat()).size;
      }
      // Right after the last look: only what lands in between is lost.
      await log.truncate(0);
    } finally {
      await out.close();
    }
    await rename(tmp, `${path}${ROTATED_SUFFIX}`);
    return { base, end, epoch };
  } finally {
    await log.close();
  }
}

/** The first line start at or after `from` (a rotated copy never begins mid-line), if one is near. */
async function lineStart(log: FileHandle, from: number, size: number): Promise<number> {
  if (from === 0) return 0;
  const buf = Buffer.alloc(Math.min(64 * 1024, size - from + 1));
  const { bytesRead } = await log.read(buf, 0, buf.length, from - 1);
  const nl = buf.subarray(0, bytesRead).indexOf(10);
  return nl === -1 ? from : from - 1 + nl + 1;
}
