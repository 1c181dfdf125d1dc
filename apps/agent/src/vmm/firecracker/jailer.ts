import type { FirecrackerConfig } from "./config.ts";
import { IN_JAIL } from "./layout.ts";

export interface JailSpec {
  jailId: string;
  uid: number;
  gid: number;
  memoryMb: number;
}

/**
 * The jailer command line for one VM: its own chroot, uid/gid and cgroup v2 group
 * (`<cgroupParent>/<jailId>`, created because at least one `--cgroup` value is given).
 * Everything after `--` goes to Firecracker; paths there are inside the chroot.
 */
export function jailerArgs(cfg: FirecrackerConfig, spec: JailSpec): string[] {
  const memoryMax = (spec.memoryMb + cfg.vmmOverheadMb) * 1024 * 1024;
  return [
    "--id",
    spec.jailId,
    "--exec-file",
    cfg.firecrackerBin,
    "--uid",
    String(spec.uid),
    "--gid",
    String(spec.gid),
    "--chroot-base-dir",
    cfg.chrootBase,
    "--cgroup-version",
    "2",
    "--parent-cgroup",
    cfg.cgroupParent,
    "--cgroup",
    `memory.max=${memoryMax}`,
    "--",
    "--api-sock",
    IN_JAIL.socket,
  ];
}
