import { open, readFile, stat } from "node:fs/promises";
import { setTimeout as delay } from "node:timers/promises";
import { QemuError, VmmExitedError } from "./errors.ts";

export async function fileSize(path: string): Promise<number> {
  return stat(path).then(
    (s) => s.size,
    () => 0,
  );
}

/**
 * Waits until the serial log, read from byte `from`, contains `DOPPIO-READY <generation>`
 * (printed by the guest once its ports answer with the new identity). Fails early when
 * `alive()` says the VMM is gone (VmmExitedError; a timeout with the VMM alive is a plain QemuError).
 */
export async function waitReady(
  serialLog: string,
  from: number,
  generation: number,
  timeoutMs: number,
  alive: () => Promise<boolean>,
): Promise<void> {
  const needle = readyLine(generation);
  const deadline = Date.now() + timeoutMs;
  let text = "";
  let offset = from;
  let checks = 0;
  for (;;) {
    const size = await fileSize(serialLog);
    if (size < offset) offset = 0; // the agent rotated the log (logs/rotate.ts): read it from its start
    if (size > offset) {
      const fh = await open(serialLog, "r");
      try {
        const buf = Buffer.alloc(size - offset);
        await fh.read(buf, 0, buf.length, offset);
        offset = size;
        text = (text + buf.toString("utf8")).slice(-64 * 1024);
      } finally {
        await fh.close();
      }
      if (needle.test(text)) return;
    }
    if (++checks % 10 === 0 && !(await alive())) {
      throw new VmmExitedError(`VMM exited before ready; console: ${tail(text)}`);
    }
    if (Date.now() > deadline) {
      throw new QemuError(
        "guest_not_ready",
        `no DOPPIO-READY ${generation} within ${timeoutMs} ms; console: ${tail(text)}`,
      );
    }
    await delay(10);
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
