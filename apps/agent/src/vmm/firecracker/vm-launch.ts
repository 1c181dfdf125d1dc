import { chown, rm, rmdir, writeFile } from "node:fs/promises";
import path from "node:path";
import { makeDirs } from "../../make-dirs.ts";
import type { BoxMetadata } from "../executor.ts";
import { FirecrackerClient } from "./api-client.ts";
import type { FirecrackerConfig } from "./config.ts";
import { linkOrClone } from "./disks.ts";
import { FirecrackerError } from "./errors.ts";
import { jailerArgs } from "./jailer.ts";
import { type HostLayout, IFACE_ID, IN_JAIL, ROOT_DRIVE, VOLUME_DRIVE } from "./layout.ts";
import type { VmmProcesses } from "./process.ts";

export interface Clock {
  now(): number;
  sleep(ms: number): Promise<void>;
}

export interface LaunchDeps {
  cfg: FirecrackerConfig;
  layout: HostLayout;
  processes: VmmProcesses;
  clock: Clock;
}

/** A host file made visible in the jail; `owned` files are chowned to the VM (read-write). */
export interface JailFile {
  host: string;
  inJail: string;
  owned: boolean;
}

export interface Jail {
  jailId: string;
  uid: number;
  gid: number;
  memoryMb: number;
  files: JailFile[];
  /** In-jail directories the VM must write to (snapshot output). */
  writableDirs?: string[];
  serialLog: string;
}

/** The MMDS store layout the guest reads: `latest/meta-data/devbox`. */
export function mmdsPayload(metadata: BoxMetadata): Record<string, unknown> {
  return { latest: { "meta-data": { devbox: metadata } } };
}

/**
 * Builds the jail from scratch (links, not copies: the in-jail names are fixed, the inodes
 * are the VM's own files), spawns the jailer and waits for the API socket.
 */
export async function launch(
  deps: LaunchDeps,
  jail: Jail,
): Promise<{ pid: number; client: FirecrackerClient }> {
  const { layout, cfg } = deps;
  await removeJail(deps, jail.jailId);
  const root = layout.jailRoot(jail.jailId);
  await makeDirs(root, 0o700);
  for (const f of jail.files) {
    const target = path.join(root, f.inJail);
    await makeDirs(path.dirname(target));
    await linkOrClone(f.host, target);
    if (f.owned) await chown(target, jail.uid, jail.gid);
  }
  for (const dir of jail.writableDirs ?? []) {
    const target = path.join(root, dir);
    await makeDirs(target, 0o700);
    await chown(target, jail.uid, jail.gid);
  }
  const { pid } = await deps.processes.spawn({
    command: cfg.jailerBin,
    args: jailerArgs(cfg, jail),
    logPath: jail.serialLog,
  });
  const client = new FirecrackerClient(layout.socket(jail.jailId), { timeoutMs: cfg.apiTimeoutMs });
  await waitForApi(deps, client, pid, jail.jailId);
  return { pid, client };
}

async function waitForApi(
  deps: LaunchDeps,
  client: FirecrackerClient,
  pid: number,
  jailId: string,
): Promise<void> {
  const deadline = deps.clock.now() + deps.cfg.apiStartTimeoutMs;
  let last: unknown;
  for (;;) {
    try {
      await client.version();
      return;
    } catch (err) {
      last = err;
    }
    if (!(await deps.processes.isAlive(pid, jailId))) {
      throw new FirecrackerError("spawn_failed", `VMM of ${jailId} exited before its API answered`, {
        cause: last,
      });
    }
    if (deps.clock.now() >= deadline) {
      throw new FirecrackerError(
        "timeout",
        `API of ${jailId} did not answer within ${deps.cfg.apiStartTimeoutMs} ms`,
        {
          cause: last,
        },
      );
    }
    await deps.clock.sleep(20);
  }
}

export interface BootDevices {
  vcpu: number;
  memoryMb: number;
  mac: string;
  tap: string;
  /** Golden only: a balloon clones inflate to give memory back (restores keep the snapshot's RAM). */
  balloon: boolean;
}

/** Logger and metrics first: they are the only resources allowed before a snapshot load. */
async function setupTelemetry(client: FirecrackerClient): Promise<void> {
  await client.putLogger({ log_path: IN_JAIL.log, level: "Info", show_level: true });
  await client.putMetrics({ metrics_path: IN_JAIL.metrics });
}

/** Cold boot configuration, MMDS included (a fresh VMM starts with an empty store). */
export async function configureAndBoot(
  client: FirecrackerClient,
  cfg: FirecrackerConfig,
  dev: BootDevices,
  mmds: Record<string, unknown>,
): Promise<void> {
  await setupTelemetry(client);
  await client.putMachineConfig({
    vcpu_count: dev.vcpu,
    mem_size_mib: dev.memoryMb,
    smt: false,
    track_dirty_pages: false,
  });
  await client.putBootSource({ kernel_image_path: IN_JAIL.kernel, boot_args: cfg.bootArgs });
  await client.putDrive({
    drive_id: ROOT_DRIVE,
    path_on_host: IN_JAIL.rootfs,
    is_root_device: true,
    is_read_only: false,
  });
  await client.putDrive({
    drive_id: VOLUME_DRIVE,
    path_on_host: IN_JAIL.volume,
    is_root_device: false,
    is_read_only: false,
  });
  await client.putNetworkInterface({ iface_id: IFACE_ID, host_dev_name: dev.tap, guest_mac: dev.mac });
  // virtio-rng: guests restored from one snapshot reseed from the host, not the shared pool.
  await client.putEntropy({});
  if (dev.balloon) await client.putBalloon({ amount_mib: 0, deflate_on_oom: true });
  // After the interface exists: the description requires listed interfaces to be valid.
  await client.putMmdsConfig({ version: "V2", network_interfaces: [IFACE_ID] });
  await client.putMmds(mmds);
  await client.action("InstanceStart");
}

/** Load the golden state paused, with the box's own TAP in place of the golden one. */
export async function loadPaused(client: FirecrackerClient, tap: string): Promise<void> {
  await setupTelemetry(client);
  await client.loadSnapshot({
    snapshot_path: IN_JAIL.vmstate,
    mem_backend: { backend_type: "File", backend_path: IN_JAIL.mem },
    track_dirty_pages: false,
    resume_vm: false,
    network_overrides: [{ iface_id: IFACE_ID, host_dev_name: tap }],
  });
}

/**
 * The box's metadata goes in while the guest is still paused, so its first instruction
 * after resume already sees its own identity; then the balloon returns the golden VM's
 * extra memory.
 */
export async function applyIdentityAndResume(
  client: FirecrackerClient,
  mmds: Record<string, unknown>,
  balloonMib: number,
): Promise<void> {
  await client.putMmds(mmds);
  await client.patchVm("Resumed");
  if (balloonMib > 0) await client.patchBalloon({ amount_mib: balloonMib });
}

/** Stops the VMM: Ctrl+Alt+Del (the guest reboots, `reboot=k` makes the VMM exit), then SIGKILL. */
export async function stopVmm(deps: LaunchDeps, jailId: string, pid: number, graceful = true): Promise<void> {
  const { processes, clock, cfg, layout } = deps;
  if (!(await processes.isAlive(pid, jailId))) return;
  const client = new FirecrackerClient(layout.socket(jailId), { timeoutMs: 2_000 });
  const asked = await (graceful ? client.action("SendCtrlAltDel") : Promise.reject(new Error("kill"))).then(
    () => true,
    () => false,
  );
  if (asked) {
    const deadline = clock.now() + cfg.stopGraceMs;
    while (clock.now() < deadline && (await processes.isAlive(pid, jailId))) await clock.sleep(100);
  }
  if (await processes.isAlive(pid, jailId)) {
    await processes.kill(pid, "SIGKILL");
    const deadline = clock.now() + 5_000;
    while (await processes.isAlive(pid, jailId)) {
      if (clock.now() >= deadline)
        throw new FirecrackerError("timeout", `VMM ${pid} of ${jailId} survived SIGKILL`);
      await clock.sleep(50);
    }
  }
}

/** Removes the jail (only links and device nodes) and its cgroup. */
export async function removeJail(deps: LaunchDeps, jailId: string): Promise<void> {
  await rm(deps.layout.jailDir(jailId), { recursive: true, force: true });
  const group = path.join(deps.cfg.cgroupRoot, deps.cfg.cgroupParent, jailId);
  await rmdir(group).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== "ENOENT") throw err;
  });
}

/** Empty per-VM log files, linked into the jail so they outlive it. */
export async function touchLogs(files: string[]): Promise<void> {
  for (const f of files) await writeFile(f, "", { flag: "a", mode: 0o600 });
}
