import { numToIp, poolLayout } from "../../cidr.ts";
import { confineArgs, INCOMING_FD, type VmmIdentity } from "./confine.ts";
import { shellMetadataPath } from "./metadata.ts";

export type Accel = "kvm" | "tcg";

export type NetAttachment =
  /** TAP on the host bridge; the guest is reached at its own IP. */
  | { kind: "tap"; tap: string; mac: string }
  /**
   * QEMU user-mode networking (laptop mode, no root): `restrict=on`, so the guest opens no
   * connection anywhere (QEMU would otherwise map the gateway to the host's loopback, with
   * Caddy's admin API and the agent on it) except `guestForwards`; `forwards` bring the
   * template's ports in from the host's loopback.
   */
  | {
      kind: "user";
      mac: string;
      ip: string;
      prefix: number;
      gateway: string;
      forwards: Array<{ hostPort: number; guestPort: number }>;
      /** gateway:guestPort → 127.0.0.1:hostPort, one socat per connection. */
      guestForwards: Array<{ guestPort: number; hostPort: number }>;
    }
  /** A NIC without a backend: the golden build, so clones may use either backend. */
  | { kind: "none"; mac: string };

export interface LaunchSpec {
  accel: Accel;
  /** TCG only: most MiB of translated code QEMU keeps (`tb-size`; the executor's default is TCG_CODE_BUFFER_MB). */
  tcgCodeBufferMb: number;
  /** Host TSC frequency; TCG guests need it (`tsc_early_khz`) or their clock runs wrong. */
  tscKhz: number | null;
  memoryMb: number;
  vcpu: number;
  kernel: string;
  initrd: string;
  rootDisk: string;
  dataDisk: { path: string; format: "raw" | "qcow2" };
  net: NetAttachment;
  metaFile: string;
  serialLog: string;
  qmpSocket: string;
  pidFile: string;
  /**
   * Restore instead of booting (starts paused; `cont` resumes): `stream` reads the migration
   * stream from the inherited `INCOMING_FD` at once; `defer` waits for the caller, which sets
   * migration capabilities over QMP and then starts it (x-ignore-shared is no `-global`
   * property in QEMU 7.2).
   */
  incoming?: "stream" | "defer";
  /**
   * Guest RAM in a file instead of anonymous memory. The golden build maps it shared (its
   * RAM lands in the file and `x-ignore-shared` keeps it out of the migration stream); a
   * clone maps the same file private (MAP_PRIVATE): it reads the golden's pages from the
   * page cache, shared by every clone, and its own writes never reach the file.
   */
  memoryFile?: { path: string; share: boolean };
  /** A box's VMM (confine.ts): its own uid (when the agent is root) and QEMU's seccomp filter. */
  confine?: { identity: VmmIdentity | null; spawn: boolean };
}

const METADATA_FW_CFG_NAME = "opt/doppio/meta";
/** Sorts after the JSON blob's name: its fw_cfg key stays the one older goldens know. */
const SHELL_METADATA_FW_CFG_NAME = "opt/doppio/shell";
/** The data disk's drive id: QMP names it (launch.ts resizes it). */
export const DATA_DRIVE_ID = "data";
/** The RAM block of a file-backed guest: its id is part of the migration stream. */
const MEMORY_BACKEND_ID = "mem";
/**
 * Most memory (MiB) a TCG guest's translated code may take in its QEMU (`tb-size`; when full,
 * QEMU drops it all and translates again). QEMU's own default is 1 GiB, which any guest can
 * fill on top of its RAM. `npm run bench:tcg` measures the code template: a cold boot to
 * code-server and its workbench fill ~430-490 MiB, a restored clone ~156 MiB; 512 MiB never
 * filled there, 256 made cold boots a little slower and 128 restored clones too.
 */
export const TCG_CODE_BUFFER_MB = 512;

export function kernelCmdline(accel: Accel, tscKhz: number | null): string {
  const args = ["console=ttyS0", "quiet", "panic=-1"];
  if (accel === "tcg" && tscKhz) args.push(`tsc_early_khz=${tscKhz}`);
  return args.join(" ");
}

/**
 * The QEMU argument vector. The device list and order are identical for a golden build,
 * a restore and a cold boot: a migration stream only loads into the same machine layout.
 */
export function qemuArgs(s: LaunchSpec): string[] {
  const args = [
    "-M",
    s.memoryFile ? `microvm,acpi=on,memory-backend=${MEMORY_BACKEND_ID}` : "microvm,acpi=on",
    ...(s.memoryFile
      ? [
          "-object",
          `memory-backend-file,id=${MEMORY_BACKEND_ID},size=${s.memoryMb}M,mem-path=${optValue(s.memoryFile.path)},share=${s.memoryFile.share ? "on" : "off"}`,
        ]
      : []),
    "-accel",
    s.accel === "tcg" ? `tcg,tb-size=${s.tcgCodeBufferMb}` : s.accel,
    ...(s.accel === "kvm" ? ["-cpu", "host"] : []),
    "-smp",
    String(s.vcpu),
    "-m",
    String(s.memoryMb),
    "-nodefaults",
    "-no-user-config",
    "-display",
    "none",
    "-no-reboot",
    "-kernel",
    s.kernel,
    "-initrd",
    s.initrd,
    "-append",
    kernelCmdline(s.accel, s.tscKhz),
    "-drive",
    `id=root,file=${optValue(s.rootDisk)},format=qcow2,if=none,discard=unmap`,
    "-device",
    "virtio-blk-device,drive=root,serial=doppio-root",
    "-drive",
    `id=${DATA_DRIVE_ID},file=${optValue(s.dataDisk.path)},format=${s.dataDisk.format},if=none,discard=unmap`,
    "-device",
    `virtio-blk-device,drive=${DATA_DRIVE_ID},serial=doppio-data`,
    ...netArgs(s.net),
    "-fw_cfg",
    `name=${METADATA_FW_CFG_NAME},file=${optValue(s.metaFile)}`,
    "-fw_cfg",
    `name=${SHELL_METADATA_FW_CFG_NAME},file=${optValue(shellMetadataPath(s.metaFile))}`,
    "-chardev",
    `file,id=serial0,path=${optValue(s.serialLog)},append=on`,
    "-serial",
    "chardev:serial0",
    "-qmp",
    `unix:${optValue(s.qmpSocket)},server=on,wait=off`,
    "-pidfile",
    s.pidFile,
  ];
  if (s.incoming) args.push("-S", "-incoming", s.incoming === "defer" ? "defer" : `fd:${INCOMING_FD}`);
  if (s.confine) args.push(...confineArgs(s.confine.identity, s.confine.spawn));
  return args;
}

function netArgs(net: NetAttachment): string[] {
  switch (net.kind) {
    case "tap":
      return [
        "-netdev",
        `tap,id=net0,ifname=${net.tap},script=no,downscript=no`,
        "-device",
        `virtio-net-device,netdev=net0,mac=${net.mac}`,
      ];
    case "user": {
      const pool = poolLayout(`${net.ip}/${net.prefix}`);
      // slirp's own addresses must not collide with a box address, and its host address
      // cannot carry a guestfwd: slirp sits on the reserved golden IP (which never uses
      // user mode) with its DNS on the network address, and the guest's gateway is only
      // the guestfwd address of the metadata service (the same URL as in tap mode).
      const slirpHost = numToIp(pool.golden);
      const dns = numToIp(pool.network);
      const fwd = net.forwards
        .map((f) => `,hostfwd=tcp:127.0.0.1:${f.hostPort}-${net.ip}:${f.guestPort}`)
        .join("");
      // A `tcp:` guestfwd serves one connection only; `cmd:` runs socat for each one.
      const guestFwd = net.guestForwards
        .map((f) => `,guestfwd=tcp:${net.gateway}:${f.guestPort}-cmd:socat - TCP:127.0.0.1:${f.hostPort}`)
        .join("");
      return [
        "-netdev",
        `user,id=net0,net=${pool.cidr},host=${slirpHost},dns=${dns},restrict=on${fwd}${guestFwd}`,
        "-device",
        `virtio-net-device,netdev=net0,mac=${net.mac}`,
      ];
    }
    case "none":
      return ["-device", `virtio-net-device,mac=${net.mac}`];
  }
}

/** QEMU option values separate keys with commas; a literal comma is written twice. */
function optValue(v: string): string {
  return v.replaceAll(",", ",,");
}
