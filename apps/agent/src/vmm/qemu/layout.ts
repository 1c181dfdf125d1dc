import { join } from "node:path";
import { slugProblem } from "@doppio/contracts";
import { QemuError } from "./errors.ts";

/** Unix socket paths must fit sockaddr_un (108 bytes with the terminator). */
const MAX_SOCKET_PATH = 104;

export interface BoxPaths {
  dir: string;
  overlay: string;
  volume: string;
  serial: string;
  qemuLog: string;
  qmp: string;
  pid: string;
  meta: string;
  /** What the box was created from and how its network is attached (box-record.ts). */
  record: string;
  /** Present after a deliberate stop: distinguishes "stopped" from "exited". */
  stopped: string;
}

export function boxPaths(dataDir: string, slug: string): BoxPaths {
  const problem = slugProblem(slug);
  if (problem) throw new QemuError("invalid_spec", `slug ${slug} ${problem}`);
  const dir = join(dataDir, "boxes", slug);
  const paths: BoxPaths = {
    dir,
    overlay: join(dir, "overlay.qcow2"),
    volume: join(dir, "volume.raw"),
    serial: join(dir, "serial.log"),
    qemuLog: join(dir, "qemu.log"),
    qmp: join(dir, "qmp.sock"),
    pid: join(dir, "qemu.pid"),
    meta: join(dir, "metadata.json"),
    record: join(dir, "box.json"),
    stopped: join(dir, "stopped"),
  };
  checkSocketPath(paths.qmp);
  return paths;
}

export function boxesDir(dataDir: string): string {
  return join(dataDir, "boxes");
}

export interface GoldenPaths {
  dir: string;
  disk: string;
  vmstate: string;
  /** An empty overlay on `disk`: clones start from a copy of it (disks.ts copyOverlay). */
  overlayTemplate: string;
  /** Guest RAM of a mapped golden (mapped-ram.ts). */
  memory: string;
  dataPlaceholder: string;
  meta: string;
  serial: string;
  qemuLog: string;
  qmp: string;
  pid: string;
  manifest: string;
}

/** Template names become directory names and appear in QEMU's `exec:` migration URI. */
function checkTemplateName(name: string): void {
  if (!/^[a-z][a-z0-9-]{0,39}$/.test(name)) throw new QemuError("invalid_spec", `bad template name ${name}`);
}

function checkVersion(version: string): void {
  if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$/.test(version)) {
    throw new QemuError("invalid_spec", `bad template version ${version}`);
  }
}

export function goldenTemplateDir(dataDir: string, template: string): string {
  checkTemplateName(template);
  return join(dataDir, "golden", template);
}

/** Each build gets its own directory: clones keep using the disk they were restored on. */
export function goldenBuildPaths(
  dataDir: string,
  template: string,
  version: string,
  buildId: string,
): GoldenPaths {
  checkVersion(version);
  const dir = join(goldenTemplateDir(dataDir, template), `${version}-${buildId}`);
  const paths: GoldenPaths = {
    dir,
    disk: join(dir, "disk.qcow2"),
    vmstate: join(dir, "vmstate"),
    memory: join(dir, "memory"),
    overlayTemplate: join(dir, "overlay-template.qcow2"),
    dataPlaceholder: join(dir, "data-placeholder.raw"),
    meta: join(dir, "metadata.json"),
    serial: join(dir, "serial.log"),
    qemuLog: join(dir, "qemu.log"),
    qmp: join(dir, "qmp.sock"),
    pid: join(dir, "qemu.pid"),
    manifest: join(dir, "manifest.json"),
  };
  checkSocketPath(paths.qmp);
  if (!/^[A-Za-z0-9_./-]+$/.test(paths.vmstate)) {
    throw new QemuError("invalid_spec", `golden path ${paths.vmstate} is not safe in a migration URI`);
  }
  return paths;
}

export interface ImagePaths {
  dir: string;
  kernel: string;
  initrd: string;
  rootfs: string;
}

/** Layout written by scripts/build-image.sh. */
export function imagePaths(imagesDir: string, template: string, version: string): ImagePaths {
  checkTemplateName(template);
  checkVersion(version);
  const dir = join(imagesDir, template, version);
  return {
    dir,
    kernel: join(dir, "vmlinuz"),
    initrd: join(dir, "initrd.img"),
    rootfs: join(dir, "rootfs.qcow2"),
  };
}

function checkSocketPath(path: string): void {
  if (Buffer.byteLength(path) > MAX_SOCKET_PATH) {
    throw new QemuError("invalid_spec", `QMP socket path too long for a unix socket: ${path}`);
  }
}
