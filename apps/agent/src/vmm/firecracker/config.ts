/** Settings of the Firecracker backend; the agent's zod config fills them once at start. */
export interface FirecrackerConfig {
  firecrackerBin: string;
  jailerBin: string;
  /** Jailer `--chroot-base-dir`; keep it on the same filesystem as `stateDir` so links work. */
  chrootBase: string;
  /** Per-VM disks, golden snapshots, uid claims. */
  stateDir: string;
  /** Template root filesystems: `<imagesDir>/<template>/rootfs.ext4` (built by build_image). */
  imagesDir: string;
  kernelPath: string;
  bootArgs: string;
  /** cgroup v2 mount point and the parent group the jailer creates `<id>` groups under. */
  cgroupRoot: string;
  cgroupParent: string;
  /** Memory the VMM itself needs on top of guest RAM, for the cgroup's memory.max. */
  vmmOverheadMb: number;
  uidBase: number;
  uidCount: number;
  golden: {
    /** The build needs more RAM than a box (bench build peaks high). */
    memoryMb: number;
    volumeGb: number;
    /** Reserved address outside the box pool, plus a TAP name of at most 15 characters. */
    net: { ip: string; prefix: number; gateway: string; mac: string; tap: string; dns: string[] };
  };
  /** Ports waited for when no golden snapshot says which (cold boot of the default template). */
  defaultReadyPorts: number[];
  apiTimeoutMs: number;
  /** How long a fresh process may take to open its API socket. */
  apiStartTimeoutMs: number;
  readyTimeoutMs: number;
  goldenReadyTimeoutMs: number;
  /** Ctrl+Alt+Del grace before SIGKILL on stop. */
  stopGraceMs: number;
}

export function firecrackerConfig(
  overrides: Partial<FirecrackerConfig> & Pick<FirecrackerConfig, "stateDir">,
): FirecrackerConfig {
  return {
    firecrackerBin: "/usr/local/bin/firecracker",
    jailerBin: "/usr/local/bin/jailer",
    chrootBase: "/srv/jailer",
    imagesDir: `${overrides.stateDir}/images`,
    kernelPath: `${overrides.stateDir}/kernel/vmlinux`,
    bootArgs: "console=ttyS0 reboot=k panic=1 pci=off root=/dev/vda rw",
    cgroupRoot: "/sys/fs/cgroup",
    cgroupParent: "doppiobox",
    vmmOverheadMb: 256,
    uidBase: 200_000,
    uidCount: 65_536,
    golden: {
      memoryMb: 4096,
      volumeGb: 10,
      net: {
        ip: "10.0.255.254",
        prefix: 16,
        gateway: "10.0.0.1",
        mac: "06:00:0a:00:ff:fe",
        tap: "fc-golden",
        dns: ["1.1.1.1"],
      },
    },
    defaultReadyPorts: [8000, 8888],
    apiTimeoutMs: 10_000,
    apiStartTimeoutMs: 10_000,
    readyTimeoutMs: 120_000,
    goldenReadyTimeoutMs: 30 * 60_000,
    stopGraceMs: 10_000,
    ...overrides,
  };
}
