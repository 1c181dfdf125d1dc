import { open, rm } from "node:fs/promises";
import { run } from "../../net/command.ts";
import { QemuError } from "./errors.ts";

/** Copy-on-write qcow2 on top of `backing` (a qcow2): cost independent of the image size. */
export async function createOverlay(backing: string, path: string): Promise<void> {
  await rm(path, { force: true });
  try {
    await run("qemu-img", ["create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", backing, path]);
  } catch (err) {
    throw new QemuError("disk_failed", `cannot create overlay ${path} on ${backing}`, { cause: err });
  }
}

/** Sparse raw file of `bytes`, unformatted. */
export async function createSparse(path: string, bytes: number): Promise<void> {
  const fh = await open(path, "w", 0o600);
  try {
    await fh.truncate(bytes);
  } finally {
    await fh.close();
  }
}

/**
 * The per-box data volume: a sparse raw file with ext4 made on the host (busybox has no
 * mkfs.ext4); the guest mounts it at /data. Lazy init keeps it instant at any size.
 */
export async function createVolume(path: string, gb: number): Promise<void> {
  await rm(path, { force: true });
  await createSparse(path, Math.round(gb * 1024 ** 3));
  try {
    await run("mkfs.ext4", [
      "-q",
      "-F",
      "-L",
      "doppio-data",
      "-E",
      "lazy_itable_init=1,lazy_journal_init=1,root_owner=0:0",
      path,
    ]);
  } catch (err) {
    throw new QemuError("disk_failed", `cannot format volume ${path}`, { cause: err });
  }
}
