import { copyFile, open, rm } from "node:fs/promises";
import { makeDirs } from "../../make-dirs.ts";
import { run } from "../../net/command.ts";
import type { VolumePool } from "../../pool/volumes.ts";
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

/**
 * A new overlay as a copy of `template`, an empty overlay made once on the same backing
 * file (the golden build writes it): a file copy of ~200 KB instead of a `qemu-img` spawn.
 * A fresh qcow2 holds no per-file identity, so the copy is what `qemu-img create` writes.
 */
async function copyOverlay(template: string, path: string): Promise<void> {
  try {
    await copyFile(template, path);
  } catch (err) {
    throw new QemuError("disk_failed", `cannot copy overlay template ${template}`, { cause: err });
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

/**
 * A new box's disks: its root overlay (a copy of the golden's empty overlay when there is
 * one) and its data volume (a pre-formatted one from the pool when one is ready), side by side.
 */
export async function prepareDisks(o: {
  dir: string;
  overlay: string;
  volume: string;
  backing: string;
  overlayTemplate: string | null;
  diskGb: number;
  volumes: VolumePool | null;
}): Promise<void> {
  await makeDirs(o.dir);
  await Promise.all([
    o.overlayTemplate ? copyOverlay(o.overlayTemplate, o.overlay) : createOverlay(o.backing, o.overlay),
    (async () => {
      if (!(await o.volumes?.take(o.diskGb, o.volume))) await createVolume(o.volume, o.diskGb);
    })(),
  ]);
}
