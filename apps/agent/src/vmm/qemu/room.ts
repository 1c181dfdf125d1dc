import { statfs } from "node:fs/promises";
import { dirname } from "node:path";

/** Fewer free blocks than this is a full filesystem (a log write needs a block now and then). */
const FULL_BELOW_BLOCKS = 16;

/**
 * Whether the filesystem holding `file` is full. QEMU writes its console and its own error
 * messages into files on the data dir: on a full disk they are lost, and this is how the
 * agent still tells why.
 */
export async function noRoom(file: string): Promise<boolean> {
  const s = await statfs(dirname(file)).catch(() => null);
  return s !== null && s.bavail < FULL_BELOW_BLOCKS;
}

/** An ENOSPC error for `file`: as a cause, it makes the job fail `disk_full` (jobs/runner.ts). */
export function noSpaceError(file: string): Error {
  return Object.assign(new Error(`no space left on device for ${file}`), { code: "ENOSPC" });
}
