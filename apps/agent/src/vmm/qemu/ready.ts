import { type FSWatcher, watch } from "node:fs";
import { open, readFile, stat } from "node:fs/promises";
import { QemuError, VmmExitedError } from "./errors.ts";
import { noRoom, noSpaceError } from "./room.ts";

export async function fileSize(path: string): Promise<number> {
  return stat(path).then(
    (s) => s.size,
    () => 0,
  );
}

/** The guest's progress markers on the console (images/minimal/rootfs/usr/lib/doppio/apply). */
const MARKER = /^doppio-t ([a-z0-9_]{1,24})\r?$/;
/** At most this many markers per wait are passed on: the console is the guest's to flood. */
const MAX_MARKS = 32;
/** With an inotify watch on the log, a re-read this often only covers a missed event. */
const WATCHED_POLL_MS = 50;
const POLL_MS = 10;
/** Reads at most this often: a guest writing its console without pause costs the agent no more. */
const MIN_READ_GAP_MS = 5;
/**
 * How often a wait looks whether the log's filesystem is full: QEMU writes the console to
 * the file, so a line the guest prints while there is no room (READY too) is lost.
 */
const ROOM_CHECK_MS = 1_000;

/**
 * Waits until the serial log, read from byte `from`, contains `DOPPIO-READY <generation>`
 * (printed by the guest once its ports answer with the new identity). Fails early when
 * `alive()` says the VMM is gone (VmmExitedError; a timeout with the VMM alive is a plain
 * QemuError). The log is re-read when inotify reports a write to it (no polling delay between
 * the guest's line and its detection, but at most one read per 5 ms), and every 50 ms anyway;
 * every 10 ms when it cannot be watched. A timeout during which the log's filesystem was
 * full says so, with an ENOSPC cause (the READY line may have been lost). `onMark` receives the guest's `doppio-t <name>`
 * lines as they arrive (benches time the steps of a restore with them). `everySecond` runs
 * once a second from the first second on (a ready guest seldom waits for it).
 */
export async function waitReady(
  serialLog: string,
  from: number,
  generation: number,
  timeoutMs: number,
  alive: () => Promise<boolean>,
  onMark?: (name: string) => void,
  everySecond?: () => Promise<void>,
): Promise<void> {
  const needle = readyLine(generation);
  const deadline = Date.now() + timeoutMs;
  let text = "";
  let offset = from;
  let lineStart = 0;
  let marks = 0;
  let lastAliveCheck = Date.now();
  // First after a second: a restore that is ready sooner makes no statfs call.
  let lastRoomCheck = Date.now();
  let fullSeen = false;
  let wake: (() => void) | null = null;
  let written = false;
  let watcher: FSWatcher | null = null;
  try {
    watcher = watch(serialLog, { persistent: false }, () => {
      written = true;
      wake?.();
    });
    watcher.on("error", () => undefined);
  } catch {
    watcher = null;
  }
  let lastRead = 0;
  try {
    for (;;) {
      const gap = lastRead + MIN_READ_GAP_MS - Date.now();
      if (gap > 0) await new Promise((r) => setTimeout(r, gap));
      lastRead = Date.now();
      written = false;
      const size = await fileSize(serialLog);
      if (size < offset) offset = 0; // the agent rotated the log (logs/rotate.ts): read it from its start
      if (size > offset) {
        const fh = await open(serialLog, "r");
        try {
          const buf = Buffer.alloc(size - offset);
          const { bytesRead } = await fh.read(buf, 0, buf.length, offset);
          offset += bytesRead;
          const joined = text + buf.subarray(0, bytesRead).toString("utf8");
          text = joined.slice(-64 * 1024);
          lineStart = Math.max(0, lineStart - (joined.length - text.length));
        } finally {
          await fh.close();
        }
        if (onMark) {
          for (let nl = text.indexOf("\n", lineStart); nl >= 0; nl = text.indexOf("\n", lineStart)) {
            const line = text.slice(lineStart, nl);
            lineStart = nl + 1;
            // Markers after READY belong to what the guest does next, not to this wait.
            if (line.replace(/\r$/, "") === `DOPPIO-READY ${generation}`) return;
            const m = MARKER.exec(line);
            if (m && marks++ < MAX_MARKS) onMark(m[1]!);
          }
        }
        if (needle.test(text)) return;
      }
      if (Date.now() - lastAliveCheck >= 100) {
        lastAliveCheck = Date.now();
        if (!(await alive())) throw new VmmExitedError(`VMM exited before ready; console: ${tail(text)}`);
      }
      if (Date.now() - lastRoomCheck >= ROOM_CHECK_MS) {
        lastRoomCheck = Date.now();
        if (!fullSeen) fullSeen = await noRoom(serialLog);
        await everySecond?.();
      }
      if (Date.now() > deadline) {
        const message = `no DOPPIO-READY ${generation} within ${timeoutMs} ms; console: ${tail(text)}`;
        if (!fullSeen) throw new QemuError("guest_not_ready", message);
        throw new QemuError(
          "guest_not_ready",
          `${message}; the host's disk was full meanwhile, so the guest's console lines may be lost`,
          { cause: noSpaceError(serialLog) },
        );
      }
      if (!written) {
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, watcher ? WATCHED_POLL_MS : POLL_MS);
          wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        wake = null;
      }
    }
  } finally {
    watcher?.close();
  }
}

/**
 * Whether the serial log already holds `DOPPIO-READY <generation>` after byte `from` (from
 * its start if the agent rotated it since), without waiting.
 */
export async function readySeen(serialLog: string, from: number, generation: number): Promise<boolean> {
  const buf = await readFile(serialLog).catch(() => Buffer.alloc(0));
  return readyLine(generation).test((buf.length < from ? buf : buf.subarray(from)).toString("utf8"));
}

function readyLine(generation: number): RegExp {
  return new RegExp(`DOPPIO-READY ${generation}\\r?\\n`);
}

function tail(text: string): string {
  return text.trim().split("\n").slice(-8).join(" | ").slice(-1500);
}
