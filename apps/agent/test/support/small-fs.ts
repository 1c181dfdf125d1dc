import { execFileSync } from "node:child_process";
import { closeSync, mkdirSync, openSync, rmSync, truncateSync, writeSync } from "node:fs";
import path from "node:path";

/** Why a size-limited filesystem cannot be mounted here (it needs root), or null. */
export function smallFsUnavailable(): string | null {
  return process.getuid?.() === 0 ? null : "mounting a size-limited filesystem needs root";
}

/**
 * `tmpfs`: in RAM, for files the test writes. `ext4`: a loop-mounted image beside the
 * directory, for a data dir that QEMU guests run from. A clone maps its golden's memory file
 * (vmm/qemu/golden.ts); on tmpfs, a guest's first read of a page the golden never touched
 * allocates that page in the file, so a full tmpfs kills QEMU with SIGBUS, which a disk
 * filesystem, like a real host's, never does.
 */
export type SmallFsKind = "tmpfs" | "ext4";

const sh = (file: string, args: string[]) => execFileSync(file, args, { stdio: "pipe" });

/**
 * A size-limited filesystem mounted on a test's directory: a host's data dir that can
 * really be filled up (ENOSPC), then freed. Unmounted by `unmount()`; nothing outside `dir`
 * (and, for ext4, its image `dir.ext4`) is touched.
 */
export class SmallFs {
  readonly #filler: string;

  private constructor(
    readonly dir: string,
    readonly image: string | null,
  ) {
    this.#filler = path.join(dir, ".filler");
  }

  static mount(dir: string, sizeBytes: number, kind: SmallFsKind = "tmpfs"): SmallFs {
    mkdirSync(dir, { recursive: true });
    if (kind === "tmpfs") {
      sh("mount", ["-t", "tmpfs", "-o", `size=${sizeBytes},mode=0755`, "tmpfs", dir]);
      return new SmallFs(dir, null);
    }
    const image = `${dir}.ext4`;
    // Sparse, no blocks reserved for root (the agent and QEMU run as root), lazily initialised.
    closeSync(openSync(image, "w"));
    truncateSync(image, sizeBytes);
    sh("mkfs.ext4", ["-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1", image]);
    // A loop device set up by mount is detached again by its umount (autoclear).
    sh("mount", ["-o", "loop", image, dir]);
    return new SmallFs(dir, image);
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
    sh("umount", [this.dir]);
    if (this.image) rmSync(this.image, { force: true });
  }
}
