import { access, readdir, rename, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { VmState } from "@doppio/contracts";
import type { Logger } from "pino";
import { VolumePool } from "../../pool/volumes.ts";
import type {
  BoxMetadata,
  Executor,
  GoldenInfo,
  HostNetwork,
  StepReporter,
  TemplateSpec,
  Upstream,
  VmSpec,
} from "../executor.ts";
import { launchWithRelaunch } from "../relaunch.ts";
import { detectAccel, hostTscKhz } from "./accel.ts";
import { type Accel, TCG_CODE_BUFFER_MB } from "./args.ts";
import type { QemuContext } from "./context.ts";
import { createVolume } from "./disks.ts";
import { QemuError, VmmExitedError } from "./errors.ts";
import { buildGoldenSnapshot, currentGolden, pruneGoldenBuilds } from "./golden.ts";
import { discardSavedMemory, type SavedMemory, savedMemory, saveMemory } from "./hibernate.ts";
import { contIfIoError, vmStatus } from "./io-pause.ts";
import { type LaunchDeps, launchBox, type Origin, upstreamOf } from "./launch.ts";
import { type BoxPaths, boxesDir, boxPaths } from "./layout.ts";
import { writeMetadataFile } from "./metadata.ts";
import { isVmProcess, killVm, readPid } from "./process.ts";
import { QmpClient } from "./qmp.ts";
import { fileSize, readySeen, waitReady } from "./ready.ts";
import { type BoxRecord, type GoldenManifest, readJson, writeJson } from "./records.ts";

export interface QemuExecutorConfig {
  /** Per-box artifacts (`boxes/<slug>/`) and golden builds (`golden/<template>/`). */
  dataDir: string;
  /** Template images as written by scripts/build-image.sh: `<template>/<version>/`. */
  imagesDir: string;
  /** Required for boxes whose spec has a TAP; null allows user-mode boxes only. */
  network: HostNetwork | null;
  /** Run QEMU inside this network namespace (tests, local stack). */
  netns?: string | null;
  goldenNet: { ip: string; prefix: number; gateway: string };
  accel?: Accel | "auto";
  /** Where the KVM probe verdict is cached; default `<dataDir>/accel.json`. */
  accelCacheFile?: string;
  /** Guest ports forwarded to loopback in user-mode networking. */
  userModePorts?: number[];
  /**
   * User-mode networking: the metadata service's port on the host's loopback; the guest
   * reaches it at <gateway>:<same port>, and nothing else of the host (`restrict=on`).
   */
  userModeMetadataPort?: number | null;
  /**
   * TEST/DEV ONLY (never set by the agent's config): more host loopback ports a user-mode
   * guest reaches at <gateway>:<same port>, like the metadata service. The real-guest Git
   * test uses it for the GitHub stand-in; each one opens the host's loopback service to
   * every guest of this executor.
   */
  userModeGuestForwards?: number[];
  readyTimeoutMs?: number;
  /**
   * Pre-formatted data volumes kept per size in `<dataDir>/volume-pool` (pool/volumes.ts);
   * 0 formats each volume on the create path. Default 2.
   */
  volumePoolPerSize?: number;
  /** Volume sizes (GiB) filled at start; other sizes join the pool on first use. */
  volumeSizesGb?: readonly number[];
  /** Golden snapshots' guest RAM: `mapped` (default, mapped-ram.ts) or `streamed`. */
  goldenMemory?: "mapped" | "streamed";
  /** Bytes per second QEMU may write a hibernating box's memory at (default: unthrottled). */
  hibernateBandwidth?: number;
  /**
   * Each box's VMM as its own unprivileged uid (confine.ts). Default: when the agent runs as
   * root (it cannot change uids otherwise); QEMU's seccomp filter applies either way.
   */
  confineVmms?: boolean;
  /** TCG guests' translated code, at most (MiB); default TCG_CODE_BUFFER_MB (args.ts). */
  tcgCodeBufferMb?: number;
  qemuBinary?: string;
  log: Logger;
  now?: () => Date;
}

/**
 * Executor on QEMU microvm. State lives on the host only: a box is running when its QEMU
 * (pid file + command line) is alive, stopped/exited when its disks remain, gone otherwise.
 * VMs run detached, so an agent restart re-attaches by pid file and QMP socket.
 */
export class QemuExecutor implements Executor {
  readonly backend = "qemu" as const;
  readonly #ctx: QemuContext;
  readonly #network: HostNetwork | null;
  readonly #userPorts: number[];
  readonly #userMetadataPort: number | null;
  readonly #userGuestForwards: number[];
  readonly #hibernateBandwidth: number | undefined;
  readonly #locks = new Map<string, Promise<unknown>>();
  readonly #goldenBuilds = new Map<string, { version: string; error: string | null; building: boolean }>();
  #accel: Promise<{ accel: Accel; tscKhz: number | null }> | null = null;
  readonly #volumes: VolumePool | null;

  constructor(config: QemuExecutorConfig) {
    const qemuBinary = config.qemuBinary ?? "qemu-system-x86_64";
    const netns = config.netns ?? null;
    const log = config.log;
    this.#network = config.network;
    this.#userPorts = config.userModePorts ?? [8000, 8888];
    this.#userMetadataPort = config.userModeMetadataPort ?? null;
    this.#userGuestForwards = config.userModeGuestForwards ?? [];
    const perSize = config.volumePoolPerSize ?? 2;
    this.#volumes =
      perSize > 0
        ? new VolumePool({
            dir: join(config.dataDir, "volume-pool"),
            perSize,
            format: createVolume,
            log: config.log,
          })
        : null;
    this.#volumes?.start(config.volumeSizesGb ?? []).catch((err: unknown) => {
      config.log.warn({ err }, "volume pool did not start; volumes are formatted on the create path");
    });
    this.#hibernateBandwidth = config.hibernateBandwidth;
    this.#ctx = {
      dataDir: config.dataDir,
      imagesDir: config.imagesDir,
      qemuBinary,
      netns,
      log,
      readyTimeoutMs: config.readyTimeoutMs ?? 120_000,
      goldenNet: config.goldenNet,
      goldenMemory: config.goldenMemory ?? "mapped",
      confineVmms: config.confineVmms ?? process.getuid?.() === 0,
      tcgCodeBufferMb: config.tcgCodeBufferMb ?? TCG_CODE_BUFFER_MB,
      now: config.now ?? (() => new Date()),
      resolveAccel: (kernel, initrd) => {
        this.#accel ??= (async () => {
          const tscKhz = await hostTscKhz();
          const wanted = config.accel ?? "auto";
          const accel =
            wanted !== "auto"
              ? wanted
              : await detectAccel({
                  qemuBinary,
                  kernel,
                  initrd,
                  netns,
                  log,
                  cacheFile: config.accelCacheFile ?? join(config.dataDir, "accel.json"),
                });
          return { accel, tscKhz };
        })();
        // A failed detection is retried on the next action instead of being cached.
        this.#accel.catch(() => {
          this.#accel = null;
        });
        return this.#accel;
      },
    };
  }

  createFromGolden(spec: VmSpec, report: StepReporter): Promise<Upstream> {
    return this.#create(spec, report, true);
  }

  createColdBoot(spec: VmSpec, report: StepReporter): Promise<Upstream> {
    return this.#create(spec, report, false);
  }

  claimParked(
    parked: string,
    spec: VmSpec,
    deliver: (meta: BoxMetadata) => void,
    report: StepReporter,
  ): Promise<Upstream> {
    return this.#locked(spec.slug, async () => {
      const from = boxPaths(this.#ctx.dataDir, parked);
      const to = boxPaths(this.#ctx.dataDir, spec.slug);
      const record = await report.step("claim_clone", async () => {
        // A live QEMU keeps its open files and its QMP socket (bound to the inode) across the
        // rename; only the process check needs the old name (BoxRecord.processDir).
        if (!(await exists(to.record))) {
          if (!(await exists(from.record)))
            throw new QemuError("not_found", `parked clone ${parked} has no artifacts on this host`);
          await rename(from.dir, to.dir);
        }
        const r = await readJson<BoxRecord>(to.record);
        if (!r) throw new QemuError("not_found", `parked clone ${parked} has no record`);
        const claimed: BoxRecord = { ...r, slug: spec.slug, processDir: r.processDir ?? from.dir };
        await Promise.all([writeJson(to.record, claimed), writeMetadataFile(to.meta, spec.metadata)]);
        return claimed;
      });
      const pid = await readPid(to.pid);
      const marker = record.processDir ?? to.dir;
      if (pid === null || !(await isVmProcess(pid, marker)))
        throw new QemuError("not_running", `parked clone ${parked} is not running`);
      const serialFrom = await fileSize(to.serial);
      await report.step("apply_identity", async () => deliver(spec.metadata));
      await report.step("wait_ready", () =>
        waitReady(to.serial, serialFrom, spec.metadata.generation, this.#ctx.readyTimeoutMs, () =>
          isVmProcess(pid, marker),
        ),
      );
      return upstreamOf(record);
    });
  }

  start(spec: VmSpec, report: StepReporter): Promise<Upstream> {
    return this.#locked(spec.slug, () => this.#start(spec, report));
  }

  stop(slug: string, report: StepReporter): Promise<void> {
    return this.#locked(slug, async () => {
      const paths = boxPaths(this.#ctx.dataDir, slug);
      const state = await this.#state(paths);
      if (state === "gone") throw new QemuError("not_found", `box ${slug} has no artifacts on this host`);
      const record = await readJson<BoxRecord>(paths.record);
      await report.step("stop_vm", async () => {
        await this.#kill(paths);
        await discardSavedMemory(paths);
      });
      await report.step("teardown_network", () => this.#removeTap(record));
      await writeFile(paths.stopped, this.#ctx.now().toISOString());
    });
  }

  hibernate(slug: string, report: StepReporter): Promise<{ memoryFileBytes: number }> {
    return this.#locked(slug, async () => {
      const paths = boxPaths(this.#ctx.dataDir, slug);
      const state = await this.#state(paths);
      const existing = await savedMemory(paths);
      if (state !== "running") {
        // Already hibernated (a retried job) is done; anything else has no memory to keep.
        if (existing) return { memoryFileBytes: existing.bytes };
        throw new QemuError("not_running", `box ${slug} is ${state}: only a running box can hibernate`);
      }
      const record = await readJson<BoxRecord>(paths.record);
      const saved = await report.step("hibernate_vm", async () => {
        // A stale stream from an earlier boot must never be taken for this one's.
        await discardSavedMemory(paths);
        const qmp = await QmpClient.connect(paths.qmp, 5_000);
        try {
          return await saveMemory(qmp, paths, this.#ctx.now, { bandwidth: this.#hibernateBandwidth });
        } finally {
          qmp.close();
        }
      });
      await report.step("stop_vm", () => this.#kill(paths));
      await report.step("teardown_network", () => this.#removeTap(record));
      this.#ctx.log.info({ slug, bytes: saved.bytes, memoryMb: saved.memoryMb }, "box hibernated");
      return { memoryFileBytes: saved.bytes };
    });
  }

  async memoryFileBytes(slug: string): Promise<number | null> {
    return (await savedMemory(boxPaths(this.#ctx.dataDir, slug)))?.bytes ?? null;
  }

  remove(slug: string, report: StepReporter): Promise<void> {
    return this.#locked(slug, async () => {
      const paths = boxPaths(this.#ctx.dataDir, slug);
      const record = await readJson<BoxRecord>(paths.record);
      await report.step("stop_vm", () => this.#kill(paths));
      await report.step("teardown_network", () => this.#removeTap(record));
      await report.step("remove_disks", () => rm(paths.dir, { recursive: true, force: true }));
    });
  }

  reset(spec: VmSpec, report: StepReporter): Promise<Upstream> {
    return this.#locked(spec.slug, async () => {
      const paths = boxPaths(this.#ctx.dataDir, spec.slug);
      const record = await readJson<BoxRecord>(paths.record);
      await report.step("stop_vm", () => this.#kill(paths));
      await report.step("remove_disks", async () => {
        await this.#removeTap(record);
        await rm(paths.dir, { recursive: true, force: true });
      });
      return this.#createLocked(spec, report, true);
    });
  }

  async inspect(slug: string): Promise<VmState> {
    return this.#state(boxPaths(this.#ctx.dataDir, slug));
  }

  serialLogPath(slug: string): string {
    return boxPaths(this.#ctx.dataDir, slug).serial;
  }

  async list(): Promise<Array<{ slug: string; state: VmState }>> {
    const entries = await readdir(boxesDir(this.#ctx.dataDir), { withFileTypes: true }).catch(() => []);
    const out: Array<{ slug: string; state: VmState }> = [];
    for (const e of entries) {
      if (!e.isDirectory()) continue;
      const state = await this.inspect(e.name).catch(() => "gone" as const);
      if (state !== "gone") out.push({ slug: e.name, state });
    }
    return out;
  }

  resumeIfIoPaused(slug: string): Promise<boolean> {
    return this.#locked(slug, async () => {
      const paths = boxPaths(this.#ctx.dataDir, slug);
      if ((await this.#state(paths)) !== "running") return false;
      if (!(await contIfIoError(paths.qmp))) return false;
      this.#ctx.log.warn({ slug }, "resumed a VM its VMM had paused on a disk write error");
      return true;
    });
  }

  async upstream(slug: string): Promise<Upstream | null> {
    const paths = boxPaths(this.#ctx.dataDir, slug);
    if ((await this.#state(paths)) !== "running") return null;
    const record = await readJson<BoxRecord>(paths.record);
    if (!record) return null;
    // A guest still booting (its launch's agent was cut off before ready) is not servable.
    if (
      record.booting &&
      !(await readySeen(paths.serial, record.booting.serialFrom, record.booting.generation))
    )
      return null;
    return upstreamOf(record);
  }

  async buildGolden(template: TemplateSpec, report: StepReporter): Promise<GoldenInfo> {
    return this.#locked(`golden:${template.name}`, async () => {
      const entry = { version: template.version, error: null as string | null, building: true };
      this.#goldenBuilds.set(template.name, entry);
      try {
        const m = await buildGoldenSnapshot(this.#ctx, template, report);
        entry.building = false;
        const removed = await pruneGoldenBuilds(this.#ctx, template.name, await this.#goldenDirsInUse());
        if (removed.length)
          this.#ctx.log.info({ template: template.name, removed }, "old golden builds removed");
        return goldenInfo(m);
      } catch (err) {
        entry.building = false;
        entry.error = (err as Error).message;
        throw err;
      }
    });
  }

  async goldenStatus(template: string): Promise<GoldenInfo> {
    const build = this.#goldenBuilds.get(template);
    if (build?.building) {
      return {
        template,
        version: build.version,
        status: "building",
        builtAt: null,
        error: null,
        imageVersion: null,
      };
    }
    const m = await currentGolden(this.#ctx, template);
    if (build?.error && (!m || m.version !== build.version)) {
      return {
        template,
        version: build.version,
        status: "failed",
        builtAt: null,
        error: build.error,
        imageVersion: null,
      };
    }
    if (!m)
      return { template, version: "", status: "missing", builtAt: null, error: null, imageVersion: null };
    return goldenInfo(m);
  }

  /** The pre-formatted volume pool (benches and tests wait for it to fill). */
  get volumePool(): VolumePool | null {
    return this.#volumes;
  }

  async close(): Promise<void> {
    // QMP connections are per action and VMs run detached: only volume refills are in flight.
    await this.#volumes?.close();
  }

  async #create(spec: VmSpec, report: StepReporter, fromGolden: boolean): Promise<Upstream> {
    return this.#locked(spec.slug, () => this.#createLocked(spec, report, fromGolden));
  }

  async #createLocked(spec: VmSpec, report: StepReporter, fromGolden: boolean): Promise<Upstream> {
    const paths = boxPaths(this.#ctx.dataDir, spec.slug);
    // Independent reads, side by side: every one is on the create path.
    const [state, record, golden] = await Promise.all([
      this.#state(paths),
      readJson<BoxRecord>(paths.record),
      fromGolden ? currentGolden(this.#ctx, spec.template) : null,
    ]);
    if (record?.created) {
      // A create that already finished (agent crashed before reporting): never wipe it.
      return state === "running" && !record.booting ? upstreamOf(record) : this.#start(spec, report);
    }
    if (state !== "gone") {
      await this.#kill(paths);
      await this.#removeTap(record);
      await rm(paths.dir, { recursive: true, force: true });
    }
    let origin: Origin = { kind: "image" };
    if (fromGolden) {
      if (!golden) throw new QemuError("golden_missing", `no golden snapshot for template ${spec.template}`);
      origin = { kind: "golden", golden };
    }
    return launchWithRelaunch({
      slug: spec.slug,
      report,
      log: this.#ctx.log,
      ...this.#relaunchRules(),
      launch: () => launchBox(this.#launchDeps(), spec, paths, origin, report),
      undo: async () => {
        await this.#kill(paths).catch(() => undefined);
        // The record may not exist yet when the failure came before it was written.
        const tap = (await readJson<BoxRecord>(paths.record))?.tap ?? spec.net.tap;
        if (tap && this.#network) await this.#network.removeTap(tap).catch(() => undefined);
        await rm(paths.dir, { recursive: true, force: true });
      },
    });
  }

  async #start(spec: VmSpec, report: StepReporter): Promise<Upstream> {
    const paths = boxPaths(this.#ctx.dataDir, spec.slug);
    const state = await this.#state(paths);
    const record = await readJson<BoxRecord>(paths.record);
    if (state === "gone" || !record)
      throw new QemuError("not_found", `box ${spec.slug} has no disks to start from`);
    const undo = async () => {
      await this.#kill(paths).catch(() => undefined);
      await this.#removeTap(record).catch(() => undefined);
    };
    if (state === "running") {
      if (!record.booting) return upstreamOf(record);
      // A launch cut off before it let its VM run (the agent restarted while QEMU loaded a
      // snapshot or saved memory, before `cont`) leaves the VM waiting for a command that
      // never comes: no READY would ever follow. That VMM goes, and this start launches anew.
      const status = await vmStatus(paths.qmp).catch(() => null);
      if (status !== null && status !== "running" && status !== "io-error") {
        await undo();
        report.log(`the earlier launch was cut off before its VM ran (it was ${status}); launching it again`);
      } else {
        try {
          await this.#finishBoot(paths, record, report);
          return upstreamOf(record);
        } catch (err) {
          // The earlier launch's VMM died before its guest was ready: this start launches anew.
          if (!(err instanceof VmmExitedError)) throw err;
          await undo();
          report.log(`the VMM exited before the guest was ready (${err.message}); launching it again`);
        }
      }
    }
    await rm(paths.stopped, { force: true });
    // Each attempt looks again: a resume killed before it consumed the saved memory resumes
    // again, one killed after boots the disks (which have moved past the saved state).
    let saved: SavedMemory | null = null;
    try {
      return await launchWithRelaunch({
        slug: spec.slug,
        report,
        log: this.#ctx.log,
        ...this.#relaunchRules(),
        launch: async () => {
          saved = await savedMemory(paths);
          const origin: Origin = saved
            ? { kind: "resume", record, saved, consume: () => discardSavedMemory(paths) }
            : { kind: "existing", record };
          return launchBox(this.#launchDeps(), spec, paths, origin, report);
        },
        undo,
      });
    } catch (err) {
      if (saved) {
        // A stream QEMU could not load is never tried again: the next start boots the disks.
        await discardSavedMemory(paths).catch(() => undefined);
        throw new QemuError(
          "resume_failed",
          `box ${spec.slug} could not be resumed from its saved memory, which is discarded (start it again to boot from its disks): ${(err as Error).message}`,
          { cause: err },
        );
      }
      throw err;
    }
  }

  /**
   * A running VMM whose launch did not see its guest ready (the agent restarted during
   * wait_ready): waits for that launch's READY line, then records the box as ready.
   */
  async #finishBoot(paths: BoxPaths, record: BoxRecord, report: StepReporter): Promise<void> {
    const { generation, serialFrom } = record.booting!;
    report.log(
      `the VMM is running but its guest was not seen ready (generation ${generation}); waiting for it`,
    );
    const marker = await processDir(paths);
    const pid = await readPid(paths.pid);
    await report.step("wait_ready", () =>
      waitReady(paths.serial, serialFrom, generation, this.#ctx.readyTimeoutMs, async () =>
        pid === null ? false : isVmProcess(pid, marker),
      ),
    );
    delete record.booting;
    record.created = true;
    await writeJson(paths.record, record);
  }

  async #state(paths: BoxPaths): Promise<VmState> {
    const pid = await readPid(paths.pid);
    if (pid !== null && (await isVmProcess(pid, await processDir(paths)))) return "running";
    if (await savedMemory(paths)) return "hibernated";
    if (await exists(paths.stopped)) return "stopped";
    if (await exists(paths.overlay)) return "exited";
    return "gone";
  }

  async #kill(paths: BoxPaths): Promise<void> {
    const pid = await readPid(paths.pid);
    if (pid !== null) await killVm(pid, await processDir(paths), paths.qmp);
    await rm(paths.qmp, { force: true });
    await rm(paths.pid, { force: true });
  }

  async #removeTap(record: BoxRecord | null): Promise<void> {
    if (record?.tap && this.#network) await this.#network.removeTap(record.tap);
  }

  /** Golden build dirs that boxes on this host were restored from (their disks back onto them). */
  async #goldenDirsInUse(): Promise<Set<string>> {
    const used = new Set<string>();
    for (const e of await readdir(boxesDir(this.#ctx.dataDir), { withFileTypes: true }).catch(() => [])) {
      if (!e.isDirectory()) continue;
      const r = await readJson<BoxRecord>(join(boxesDir(this.#ctx.dataDir), e.name, "box.json"));
      if (r?.goldenDir) used.add(r.goldenDir);
    }
    return used;
  }

  /** A launch is tried again when its VMM exited (VmmExitedError), never after a plain timeout. */
  #relaunchRules() {
    return {
      exited: (err: unknown) => err instanceof VmmExitedError,
      gaveUp: (message: string, last: Error) => new QemuError("guest_not_ready", message, { cause: last }),
    };
  }

  #launchDeps(): LaunchDeps {
    return {
      ctx: this.#ctx,
      network: this.#network,
      userPorts: this.#userPorts,
      userMetadataPort: this.#userMetadataPort,
      userGuestForwards: this.#userGuestForwards,
      volumes: this.#volumes,
    };
  }

  /** Serialises actions per box (and per golden template) inside this agent. */
  async #locked<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.#locks.get(key) ?? Promise.resolve();
    const next = prev.then(fn, fn);
    const tail = next.catch(() => undefined);
    this.#locks.set(key, tail);
    try {
      return await next;
    } finally {
      if (this.#locks.get(key) === tail) this.#locks.delete(key);
    }
  }
}

function goldenInfo(m: GoldenManifest): GoldenInfo {
  return {
    template: m.template,
    version: m.version,
    status: "ready",
    builtAt: m.builtAt,
    error: null,
    // Builds from before manifests recorded it booted the image named by the template version.
    imageVersion: m.imageVersion ?? m.version,
  };
}

/** The directory on the box's QEMU command line (a claimed pool clone's is its old one). */
async function processDir(paths: BoxPaths): Promise<string> {
  return (await readJson<BoxRecord>(paths.record))?.processDir ?? paths.dir;
}

async function exists(path: string): Promise<boolean> {
  return access(path).then(
    () => true,
    () => false,
  );
}
