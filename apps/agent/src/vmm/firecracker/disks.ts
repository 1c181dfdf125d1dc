import { execFile } from "node:child_process";
import { chmod, link, open, rm, stat } from "node:fs/promises";
import { promisify } from "node:util";
import { FirecrackerError } from "./errors.ts";

const run = promisify(execFile);

async function tool(cmd: string, args: string[]): Promise<void> {
  try {
    await run(cmd, args, { maxBuffer: 1024 * 1024 });
  } catch (err) {
    const stderr = (err as { stderr?: string }).stderr?.trim();
    throw new FirecrackerError(
      "disk_failed",
      `${cmd} ${args.join(" ")} failed${stderr ? `: ${stderr}` : ""}`,
      {
        cause: err,
      },
    );
  }
}

/**
 * Copy-on-write clone of a disk image: a reflink where the filesystem shares extents
 * (XFS, btrfs), otherwise a sparse copy that keeps holes as holes.
 */
export async function cloneDisk(src: string, dst: string): Promise<void> {
  await rm(dst, { force: true });
  await tool("cp", ["--reflink=auto", "--sparse=always", "--", src, dst]);
  // cp keeps the source mode; golden masters are read-only, a clone is the VM's to write.
  await chmod(dst, 0o600);
}

/**
 * Puts `src` at `dst` sharing its inode (no data written). Across filesystems a hard link
 * is impossible, so it falls back to a clone.
 */
export async function linkOrClone(src: string, dst: string): Promise<"link" | "clone"> {
  await rm(dst, { force: true });
  try {
    await link(src, dst);
    return "link";
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code !== "EXDEV" && code !== "EPERM" && code !== "EMLINK") throw err;
    await cloneDisk(src, dst);
    await chmod(dst, (await stat(src)).mode & 0o7777);
    return "clone";
  }
}

/** A new sparse ext4 image of `gb` GiB. */
export async function createVolume(path: string, gb: number): Promise<void> {
  await rm(path, { force: true });
  const fh = await open(path, "wx", 0o600);
  try {
    await fh.truncate(gb * 1024 ** 3);
  } finally {
    await fh.close();
  }
  await tool("mkfs.ext4", ["-F", "-q", "-L", "volume", path]);
}

/** Grows a file to `gb` GiB (never shrinks); the guest sees the size at its next cold boot. */
export async function growTo(path: string, gb: number): Promise<void> {
  const want = gb * 1024 ** 3;
  const st = await stat(path);
  if (st.size >= want) return;
  const fh = await open(path, "r+");
  try {
    await fh.truncate(want);
  } finally {
    await fh.close();
  }
}

/** Golden masters are shared by every clone's jail through hard links: read-only for all. */
export async function freezeShared(path: string): Promise<void> {
  await chmod(path, 0o444);
}
