import { access, readdir } from "node:fs/promises";
import { createServer } from "node:net";
import { dirname, join } from "node:path";
import type { VolumePool } from "../../pool/volumes.ts";
import type { HostNetwork, StepReporter, Upstream, VmSpec } from "../executor.ts";
import type { NetAttachment } from "./args.ts";
import { DATA_DRIVE_ID, qemuArgs } from "./args.ts";
import { confineBoxDir, openWayTo, VMM_MAX_PROCESSES, vmmIdentity } from "./confine.ts";
import type { QemuContext } from "./context.ts";
import { prepareDisks } from "./disks.ts";
import { QemuError, VmmExitedError } from "./errors.ts";
import { currentGolden } from "./golden.ts";
import type { SavedMemory } from "./hibernate.ts";
import { contIfIoError } from "./io-pause.ts";
import { type BoxPaths, imagePaths } from "./layout.ts";
import { startMappedIncoming } from "./mapped-ram.ts";
import { writeMetadataFile } from "./metadata.ts";
import { isVmProcess, launchQemu } from "./process.ts";
import type { QmpClient } from "./qmp.ts";
import { fileSize, waitReady } from "./ready.ts";
import { type BoxRecord, type GoldenManifest, writeJson } from "./records.ts";
import { restoreBoot } from "./restore-boot.ts";
import { noRoom } from "./room.ts";

/** Where a box's disks come from: a golden snapshot, the template image, or its own. */
export type Origin =
  | { kind: "golden"; golden: GoldenManifest }
  | { kind: "image" }
  | { kind: "existing"; record: BoxRecord }
  /**
   * Its own disks and its saved memory (hibernate.ts); `consume` runs once the stream is
   * loaded, before the guest runs: from then on the disks move past the saved state.
   */
  | { kind: "resume"; record: BoxRecord; saved: SavedMemory; consume: () => Promise<void> };

export interface LaunchDeps {
  ctx: QemuContext;
  network: HostNetwork | null;
  /** Guest ports forwarded to loopback in user-mode networking. */
  userPorts: number[];
  /** User-mode networking: the metadata service on loopback, the guest's only way out. */
  userMetadataPort: number | null;
  /** Test/dev only (QemuExecutorConfig.userModeGuestForwards): more loopback ports, the same way. */
  userGuestForwards?: number[];
  /** Pre-formatted data volumes; null formats each one on the create path. */
  volumes: VolumePool | null;
}

/** Disks (for new boxes), network, QEMU (boot or restore), then the guest's READY. */
export async function launchBox(
  deps: LaunchDeps,
  spec: VmSpec,
  paths: BoxPaths,
  origin: Origin,
  report: StepReporter,
): Promise<Upstream> {
  const generation = spec.metadata.generation;
  if (!Number.isInteger(generation) || generation < 1) {
    throw new QemuError("invalid_spec", "metadata.generation must be 1 or more (0 is the golden build)");
  }
  const started = Date.now();
  let record: BoxRecord;
  let disks: Promise<void> = Promise.resolve();
  if (origin.kind === "existing" || origin.kind === "resume") {
    record = {
      ...origin.record,
      // A start boots the box's own disks with anonymous RAM; a resume keeps the RAM block
      // the hibernated VM had (its migration stream names it).
      memoryFile: origin.kind === "resume" ? origin.record.memoryFile : undefined,
      // A new QEMU is launched from this directory (a claimed pool clone's old one is gone).
      processDir: undefined,
      ip: spec.net.ip,
      prefix: spec.net.prefix,
      gateway: spec.net.gateway,
      mac: spec.net.mac,
      tap: spec.net.tap,
    };
  } else {
    const base = origin.kind === "golden" ? origin.golden : await imageBase(deps.ctx, spec.template);
    record = {
      slug: spec.slug,
      template: spec.template,
      goldenDir: origin.kind === "golden" ? origin.golden.dir : null,
      ...(origin.kind === "golden" && origin.golden.memoryFile
        ? { memoryFile: origin.golden.memoryFile }
        : {}),
      kernel: base.kernel,
      initrd: base.initrd,
      accel: base.accel,
      tscKhz: base.tscKhz,
      ip: spec.net.ip,
      prefix: spec.net.prefix,
      gateway: spec.net.gateway,
      mac: spec.net.mac,
      tap: spec.net.tap,
      forwards: {},
      created: false,
    };
    const overlayTemplate = origin.kind === "golden" ? (origin.golden.overlayTemplate ?? null) : null;
    disks = report.step("prepare_disks", () =>
      prepareDisks({
        dir: paths.dir,
        overlay: paths.overlay,
        volume: paths.volume,
        backing: base.disk,
        overlayTemplate,
        diskGb: spec.diskGb,
        volumes: deps.volumes,
      }),
    );
  }
  // Disks and network do not depend on each other: made side by side.
  const attach = report.step("setup_network", async () => {
    if (spec.net.tap) {
      if (!deps.network)
        throw new QemuError("invalid_spec", "box asks for a TAP but the agent has no host network");
      await deps.network.createTap(spec.net.tap, spec.net);
      record.forwards = {};
      return { kind: "tap", tap: spec.net.tap, mac: spec.net.mac } satisfies NetAttachment;
    }
    const ports = new Set([
      ...deps.userPorts,
      ...(origin.kind === "golden" ? (origin.golden.readyPorts ?? []) : []),
      ...(origin.kind === "existing" || origin.kind === "resume"
        ? Object.keys(origin.record.forwards).map(Number)
        : []),
    ]);
    const forwards = await Promise.all(
      [...ports].map(async (guestPort) => ({ guestPort, hostPort: await freePort() })),
    );
    record.forwards = Object.fromEntries(forwards.map((f) => [String(f.guestPort), f.hostPort]));
    return {
      kind: "user",
      mac: spec.net.mac,
      ip: spec.net.ip,
      prefix: spec.net.prefix,
      gateway: spec.net.gateway,
      forwards,
      guestForwards: [
        ...(deps.userMetadataPort ? [deps.userMetadataPort] : []),
        ...(deps.userGuestForwards ?? []),
      ].map((port) => ({ guestPort: port, hostPort: port })),
    } satisfies NetAttachment;
  });
  // Both settle before a failure is thrown, so the executor's cleanup finds everything made.
  const [madeDisks, attached] = await Promise.allSettled([disks, attach]);
  if (madeDisks.status === "rejected") throw madeDisks.reason;
  if (attached.status === "rejected") throw attached.reason;
  const net = attached.value;
  const serialFrom = await fileSize(paths.serial);
  record.booting = { generation, serialFrom };
  await Promise.all([writeJson(paths.record, record), writeMetadataFile(paths.meta, spec.metadata)]);
  const restore = origin.kind === "golden" ? origin.golden : origin.kind === "resume" ? origin.saved : null;
  // A mapped golden's clone loads device state only (mapped-ram.ts); a resume of a clone maps
  // the same file private again, and its stream carries all of the RAM.
  const mapped = origin.kind === "golden" && origin.golden.memoryFile ? origin.golden : null;
  // A restored VM never boots its kernel: stand-ins keep its contents out of QEMU's memory.
  const boot = restore && record.goldenDir ? await restoreBoot(record.goldenDir) : null;
  const identity = deps.ctx.confineVmms ? vmmIdentity(spec.net.ip, spec.net.prefix) : null;
  if (identity) {
    const opened = await openWayTo(dirname(paths.dir));
    if (opened.length) deps.ctx.log.warn({ opened }, "let boxes' VMM users pass through these directories");
    await confineBoxDir(paths.dir, [paths.overlay, paths.volume], identity);
  }
  const args = qemuArgs({
    accel: record.accel,
    tcgCodeBufferMb: deps.ctx.tcgCodeBufferMb,
    tscKhz: record.tscKhz,
    // A migration stream only loads into a machine with the golden VM's memory size.
    memoryMb: restore ? restore.memoryMb : spec.memoryMb,
    vcpu: restore ? restore.vcpu : spec.vcpu,
    kernel: boot?.kernel ?? record.kernel,
    initrd: boot?.initrd ?? record.initrd,
    rootDisk: paths.overlay,
    dataDisk: { path: paths.volume, format: "raw" },
    net,
    metaFile: paths.meta,
    serialLog: paths.serial,
    qmpSocket: paths.qmp,
    pidFile: paths.pid,
    ...(restore ? { incoming: mapped ? "defer" : "stream" } : {}),
    ...(record.memoryFile ? { memoryFile: { path: record.memoryFile, share: false } } : {}),
    confine: { identity, spawn: net.kind === "user" },
  });
  const stepName = origin.kind === "resume" ? "resume_vm" : restore ? "restore_vm" : "boot_vm";
  const { pid, qmp } = await report.step(stepName, async () => {
    const launched = await launchQemu({
      qemuBinary: deps.ctx.qemuBinary,
      netns: deps.ctx.netns,
      args,
      logFile: paths.qemuLog,
      pidFile: paths.pid,
      qmpSocket: paths.qmp,
      ...(restore ? { incomingFile: restore.vmstate } : {}),
      ...(identity ? { maxProcesses: VMM_MAX_PROCESSES } : {}),
    });
    report.mark?.("qemu_up");
    try {
      if (mapped) await startMappedIncoming(launched.qmp);
      if (restore) {
        await resumeAfterIncoming(
          launched.qmp,
          origin.kind === "resume" ? origin.consume : () => announceDataDiskSize(launched.qmp, paths.volume),
          report,
        );
      }
    } catch (err) {
      launched.qmp.close();
      // QMP fails when its VMM is killed mid-restore: that is the VMM's exit, not the restore's.
      if (await isVmProcess(launched.pid, paths.dir)) throw err;
      throw new VmmExitedError(`the VMM exited while the VM was loaded: ${(err as Error).message}`, {
        cause: err,
      });
    }
    return launched;
  });
  qmp.close();
  await report.step("wait_ready", () =>
    waitReady(
      paths.serial,
      serialFrom,
      generation,
      deps.ctx.readyTimeoutMs,
      () => isVmProcess(pid, paths.dir),
      (mark) => report.mark?.(`guest_${mark}`),
      // A guest whose write met a full host disk while it comes up is paused by QEMU; once
      // there is room again it goes on (reconcile does this too, but not while a job holds the box).
      async () => {
        if (await noRoom(paths.serial)) return;
        if (await contIfIoError(paths.qmp).catch(() => false)) {
          deps.ctx.log.warn(
            { slug: spec.slug },
            "resumed a VM paused on a disk write error while it came up",
          );
        }
      },
    ),
  );
  delete record.booting;
  record.created = true;
  await writeJson(paths.record, record);
  deps.ctx.log.info(
    {
      slug: spec.slug,
      ms: Date.now() - started,
      mode: origin.kind === "resume" ? "resume" : restore ? "restore" : "boot",
      accel: record.accel,
    },
    "box ready",
  );
  return upstreamOf(record);
}

async function imageBase(ctx: QemuContext, template: string) {
  const version = await imageVersion(ctx, template);
  const img = imagePaths(ctx.imagesDir, template, version);
  await access(img.rootfs).catch((err) => {
    throw new QemuError("image_missing", `no image for template ${template} at ${img.dir}`, err);
  });
  const { accel, tscKhz } = await ctx.resolveAccel(img.kernel, img.initrd);
  return { kernel: img.kernel, initrd: img.initrd, disk: img.rootfs, accel, tscKhz };
}

/** Cold boots use the golden's image version when there is one, else the newest image. */
async function imageVersion(ctx: QemuContext, template: string): Promise<string> {
  const golden = await currentGolden(ctx, template);
  if (golden) return golden.imageVersion ?? golden.version;
  const dir = join(ctx.imagesDir, template);
  const versions = (await readdir(dir, { withFileTypes: true }).catch(() => []))
    .filter((e) => e.isDirectory() && !e.name.startsWith("."))
    .map((e) => e.name)
    .sort();
  const newest = versions.at(-1);
  if (!newest) throw new QemuError("image_missing", `no image built for template ${template} in ${dir}`);
  return newest;
}

/**
 * A golden clone's kernel still holds the size of the golden's 1 MiB data placeholder
 * (golden.ts): a `block_resize` to the volume's own size makes QEMU raise a virtio config
 * change, so the guest's driver reads the real size as soon as it runs, instead of the
 * guest re-probing the disk (unbind and bind of virtio_blk, the slowest step of its apply).
 */
async function announceDataDiskSize(qmp: QmpClient, volume: string): Promise<void> {
  await qmp.execute("block_resize", { device: DATA_DRIVE_ID, size: await fileSize(volume) });
}

/** After `-incoming` with `-S`: wait for the stream to load, then resume the guest. */
async function resumeAfterIncoming(
  qmp: QmpClient,
  beforeCont: () => Promise<void>,
  report: StepReporter,
): Promise<void> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const s = await qmp.execute<{ status: string }>("query-status");
    if (s.status !== "inmigrate") {
      if (s.status !== "paused" && s.status !== "prelaunch") {
        throw new QemuError("migration_failed", `after restore the VM is ${s.status}`);
      }
      break;
    }
    if (Date.now() > deadline) throw new QemuError("timeout", "restore did not finish loading");
    // A mapped golden's stream (device state only) loads in a few ms: polled that finely.
    await new Promise((r) => setTimeout(r, 2));
  }
  report.mark?.("loaded");
  await beforeCont();
  report.mark?.("before_cont");
  await qmp.execute("cont");
  report.mark?.("cont");
}

export function upstreamOf(record: BoxRecord): Upstream {
  if (record.tap) return (port) => `${record.ip}:${port}`;
  return (port) => {
    const host = record.forwards[String(port)];
    return host ? `127.0.0.1:${host}` : null;
  };
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      srv.close(() =>
        typeof addr === "object" && addr ? resolve(addr.port) : reject(new Error("no free port")),
      );
    });
  });
}
