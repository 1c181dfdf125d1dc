import { mkdirSync } from "node:fs";
import { mkdir } from "node:fs/promises";

/**
 * `mkdir -p`. Node 20's asynchronous recursive mkdir reports a failure of the last mkdir as
 * ENOENT whatever it was (measured: on a full ext4 the async call says ENOENT where the
 * synchronous one says ENOSPC), and a full disk must fail a job with `disk_full`, not
 * "internal". So on ENOENT the synchronous call runs once: it makes the directory if it
 * could after all, or throws the real error.
 */
export async function makeDirs(dir: string, mode?: number): Promise<void> {
  try {
    await mkdir(dir, { recursive: true, mode });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
    mkdirSync(dir, { recursive: true, mode });
  }
}
