import { createHash } from "node:crypto";
import path from "node:path";

/**
 * Paths Firecracker sees inside every jail. They are the same for every VM, so a golden
 * snapshot (which records drive paths) restores into any jail without renames or locks.
 */
export const IN_JAIL = {
  kernel: "/vmlinux",
  rootfs: "/rootfs.ext4",
  volume: "/volume.ext4",
  snapshotDir: "/snapshot",
  vmstate: "/snapshot/vmstate",
  mem: "/snapshot/mem",
  socket: "/run/firecracker.socket",
  log: "/firecracker.log",
  metrics: "/metrics.json",
} as const;

export const IFACE_ID = "eth0";
export const ROOT_DRIVE = "rootfs";
export const VOLUME_DRIVE = "volume";

/** Host paths of the backend. `execName` is the basename of the (resolved) Firecracker binary. */
export class HostLayout {
  constructor(
    readonly stateDir: string,
    readonly chrootBase: string,
    readonly execName: string,
  ) {}

  vmsDir(): string {
    return path.join(this.stateDir, "vms");
  }
  vmDir(slug: string): string {
    return path.join(this.vmsDir(), slug);
  }
  vmFile(
    slug: string,
    name:
      | "vm.json"
      | "rootfs.ext4"
      | "volume.ext4"
      | "serial.log"
      | "firecracker.log"
      | "metrics.json"
      | "snapshot",
  ): string {
    return path.join(this.vmDir(slug), name);
  }
  uidsDir(): string {
    return path.join(this.stateDir, "uids");
  }

  goldenDir(template: string): string {
    return path.join(this.stateDir, "golden", templateKey(template));
  }
  goldenBuildDir(template: string, buildId: string): string {
    return path.join(this.goldenDir(template), "builds", buildId);
  }

  /** `<chroot_base>/<exec_file_name>/<id>`, as the jailer builds it. */
  jailDir(jailId: string): string {
    return path.join(this.chrootBase, this.execName, jailId);
  }
  jailRoot(jailId: string): string {
    return path.join(this.jailDir(jailId), "root");
  }
  inJail(jailId: string, inJailPath: string): string {
    return path.join(this.jailRoot(jailId), inJailPath);
  }
  socket(jailId: string): string {
    return this.inJail(jailId, IN_JAIL.socket);
  }
}

/** Jail ids allow letters, digits and hyphens, 64 at most; box slugs already fit. */
export function boxJailId(slug: string): string {
  return `box-${slug}`;
}

export function goldenJailId(template: string, buildId: string): string {
  return `gold-${createHash("sha256").update(template).digest("hex").slice(0, 12)}-${buildId}`;
}

/** Template names become directory names as-is when safe, else by hash. */
function templateKey(template: string): string {
  return /^[a-z0-9][a-z0-9._-]{0,63}$/.test(template) && !template.includes("..")
    ? template
    : `t-${createHash("sha256").update(template).digest("hex").slice(0, 16)}`;
}
