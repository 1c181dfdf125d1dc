import { execFileSync } from "node:child_process";
import { closeSync, mkdirSync, openSync, rmSync, writeSync } from "node:fs";
import path from "node:path";

/** Why a size-limited filesystem cannot be mounted here (tmpfs needs root), or null. */
export function smallFsUnavailable(): string | null {
  return process.getuid?.() === 0 ? null : "mounting a size-limited tmpfs needs root";
}

/**
 * A size-limited tmpfs mounted on a test's directory: a host's data dir that can really be
 * filled up (ENOSPC), then freed. Unmounted by `unmount()`; nothing outside `dir` is touched.
 */
export class SmallFs {
  readonly #filler: string;

  private constructor(readonly dir: string) {
    this.#filler = path.join(dir, ".filler");
  }

  static mount(dir: string, sizeBytes: number): SmallFs {
    mkdirSync(dir, { recursive: true });
    execFileSync("mount", ["-t", "tmpfs", "-o", `size=${sizeBytes},mode=0755`, "tmpfs", dir], {
      stdio: "pipe",
    });
    return new SmallFs(dir);
  }

  /** Writes one file until the filesystem says ENOSPC; returns the bytes it took. */
  fill(): number {
    const fd = openSync(this.#filler, "a");
    const chunk = Buffer.alloc(64 * 1024, 7);
    let written = 0;
    try {
      for (;;) written += writeSync(fd, chunk);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOSPC") throw err;
    } finally {
      closeSync(fd);
    }
    // The last partial blocks too, byte by byte in small writes.
    const small = openSync(this.#filler, "a");
    try {
      for (;;) written += writeSync(small, Buffer.alloc(512, 7));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOSPC") throw err;
    } finally {
      closeSync(small);
    }
    return written;
  }

  free(): void {
    rmSync(this.#filler, { force: true });
  }

  unmount(): void {
    execFileSync("umount", [this.dir], { stdio: "pipe" });
  }
}
