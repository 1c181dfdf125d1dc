import { existsSync } from "node:fs";
import { readdir, realpath, rm } from "node:fs/promises";
import path from "node:path";
import { slugProblem, type VmState } from "@doppio/contracts";
import type { Logger } from "pino";
import { makeDirs } from "../../make-dirs.ts";
import type {
  Executor,
  GoldenInfo,
  HostNetwork,
  StepReporter,
  TemplateSpec,
  Upstream,
  VmSpec,
} from "../executor.ts";
import { launchWithRelaunch } from "../relaunch.ts";
import { FirecrackerClient } from "./api-client.ts";
import { CleanupStack } from "./cleanup.ts";
import type { FirecrackerConfig } from "./config.ts";
import { cloneDisk, createVolume, growTo } from "./disks.ts";
import { FirecrackerError } from "./errors.ts";
import { buildGolden, currentGolden, type GoldenDeps, goldenStatus, type ReadinessProbe } from "./golden.ts";
import {
  commitSnapshot,
  discardSavedMemory,
  prepareSnapshotDir,
  type SavedMemory,
  savedMemory,
  snapshotPaused,
} from "./hibernate.ts";
import { boxJailId, HostLayout, IN_JAIL } from "./layout.ts";
import type { VmmProcesses } from "./process.ts";
import { claimUid, releaseUid } from "./uid-pool.ts";
import {
  applyIdentityAndResume,
  type Clock,
  configureAndBoot,
  type JailFile,
  launch,
  loadPaused,
  mmdsPayload,
  removeJail,
  stopVmm,
  touchLogs,
} from "./vm-launch.ts";
import { readRecord, type VmRecord, writeRecord } from "./vm-record.ts";

export interface FirecrackerExecutorDeps {
  cfg: FirecrackerConfig;
  network: HostNetwork;
  processes: VmmProcesses;
  probe: ReadinessProbe;
  clock: Clock;
  log: Logger;
  /** Basename of the resolved Firecracker binary: the jailer names chroots after it. */
  execName: string;
}

/** The jailer canonicalises `--exec-file`, so a symlinked binary names the chroot after its target. */
export async function resolveExecName(firecrackerBin: string): Promise<string> {
  return path.basename(await realpath(firecrackerBin).catch(() => firecrackerBin));
}

const upstreamAt =
  (ip: string): Upstream =>
  (port) =>
    `${ip}:${port}`;

/**
 * Firecracker backend: one jailer-confined VMM per box. Restores from a golden snapshot
 * run in parallel because every jail presents the same in-jail paths and the restored
 * NIC is pointed at the box's TAP by `network_overrides`; nothing host-wide is locked.
 */
export class FirecrackerExecutor implements Executor {
  readonly backend = "firecracker" as const;
  private readonly deps: GoldenDeps;
  private readonly layout: HostLayout;
  private readonly goldenBuilds = new Map<string, Promise<GoldenInfo>>();
  /** The VMM a setup launched, by its cleanup stack: guarded() asks whether it still runs. */
  private readonly vmmOf = new WeakMap<CleanupStack, { pid: number; jailId: string }>();

  constructor(private readonly d: FirecrackerExecutorDeps) {
    this.layout = new HostLayout(d.cfg.stateDir, d.cfg.chrootBase, d.execName);
    this.deps = {
      cfg: d.cfg,
      layout: this.layout,
      processes: d.processes,
      clock: d.clock,
      network: d.network,
      probe: d.probe,
      log: d.log,
    };
  }

  async createFromGolden(spec: VmSpec, report: StepReporter): Promise<Upstream> {
    const tap = requireTap(spec);
    if ((await this.prepareCreate(spec.slug)) === "exists") return this.start(spec, report);
    const golden = await currentGolden(this.deps, spec.template);
    if (!golden)
      throw new FirecrackerError("golden_missing", `no golden snapshot for template ${spec.template}`);
    return this.relaunching(spec, report, async (cleanup) => {
      const rec = await this.newRecord(spec, golden.info.buildId, cleanup);
      await report.step("prepare_disks", async () => {
        await cloneDisk(path.join(golden.dir, "rootfs.ext4"), this.layout.vmFile(spec.slug, "rootfs.ext4"));
        await cloneDisk(path.join(golden.dir, "volume.ext4"), this.layout.vmFile(spec.slug, "volume.ext4"));
        await growTo(this.layout.vmFile(spec.slug, "volume.ext4"), spec.diskGb);
      });
      await this.setupNetwork(spec, report, cleanup);
      const { client } = await report.step("restore_vm", async () => {
        const files = [
          ...this.diskFiles(spec.slug),
          { host: path.join(golden.dir, "vmstate"), inJail: IN_JAIL.vmstate, owned: false },
          { host: path.join(golden.dir, "mem"), inJail: IN_JAIL.mem, owned: false },
        ];
        const launched = await this.launchBox(rec, spec.memoryMb, files, cleanup);
        await loadPaused(launched.client, tap);
        return launched;
      });
      await report.step("apply_identity", async () => {
        const balloon = Math.max(0, golden.info.memoryMb - spec.memoryMb);
        await applyIdentityAndResume(client, mmdsPayload(spec.metadata), balloon);
        await writeRecord(this.layout.vmFile(spec.slug, "vm.json"), {
          ...rec,
          lifecycle: "running",
          ready: false,
        });
      });
      await this.waitReady(spec, golden.info.readyPorts, report);
      this.d.log.info({ slug: spec.slug, buildId: golden.info.buildId }, "restored from golden");
      return upstreamAt(spec.net.ip);
    });
  }

  async createColdBoot(spec: VmSpec, report: StepReporter): Promise<Upstream> {
    requireTap(spec);
    if ((await this.prepareCreate(spec.slug)) === "exists") return this.start(spec, report);
    return this.relaunching(spec, report, async (cleanup) => {
      const rec = await this.newRecord(spec, null, cleanup);
      await report.step("prepare_disks", async () => {
        const image = path.join(this.d.cfg.imagesDir, spec.template, "rootfs.ext4");
        await cloneDisk(image, this.layout.vmFile(spec.slug, "rootfs.ext4"));
        await createVolume(this.layout.vmFile(spec.slug, "volume.ext4"), spec.diskGb);
      });
      return this.bootFromDisks(spec, rec, report, cleanup);
    });
  }

  async start(spec: VmSpec, report: StepReporter): Promise<Upstream> {
    requireTap(spec);
    const rec = await readRecord(this.layout.vmFile(spec.slug, "vm.json"));
    if (!rec) throw new FirecrackerError("not_found", `box ${spec.slug} has no disks on this host`);
    if (rec.pid && (await this.d.processes.isAlive(rec.pid, rec.jailId))) {
      // A start cut off (agent restart) before its guest answered: wait for it now.
      if (rec.ready === false) await this.waitReady(spec, await this.readyPorts(spec.template), report);
      return upstreamAt(rec.ip);
    }
    // Each attempt looks again: a resume whose VMM died before it dropped the saved memory
    // resumes again; one that died after boots the disks (they have moved past that state).
    let saved: SavedMemory | null = null;
    try {
      return await this.relaunching(spec, report, async (cleanup) => {
        saved = await savedMemory(this.layout, spec.slug);
        if (saved) return this.resume(spec, rec, saved, report, cleanup);
        await this.prepareBoot(spec, rec, report);
        return this.bootFromDisks(
          spec,
          { ...rec, ip: spec.net.ip, tap: spec.net.tap, pid: null },
          report,
          cleanup,
        );
      });
    } catch (err) {
      if (!saved) throw err;
      // A snapshot that did not load is never tried again: the next start boots the disks.
      await discardSavedMemory(this.layout, spec.slug).catch(() => undefined);
      throw new FirecrackerError(
        "resume_failed",
        `box ${spec.slug} could not be resumed from its saved memory, which is discarded (start it again to boot from its disks): ${(err as Error).message}`,
        { cause: err },
      );
    }
  }

  /** Before a start boots the box's disks: they are there, the volume has its size, no jail is left. */
  private async prepareBoot(spec: VmSpec, rec: VmRecord, report: StepReporter): Promise<void> {
    await report.step("prepare_disks", async () => {
      for (const f of ["rootfs.ext4", "volume.ext4"] as const) {
        if (!existsSync(this.layout.vmFile(spec.slug, f))) {
          throw new FirecrackerError("not_found", `box ${spec.slug} is missing ${f}`);
        }
      }
      // Without saved memory a start cold-boots: the golden restore's `snapshot` dir is never reused.
      await rm(this.layout.vmFile(spec.slug, "snapshot"), { recursive: true, force: true });
      await growTo(this.layout.vmFile(spec.slug, "volume.ext4"), spec.diskGb);
      await removeJail(this.deps, rec.jailId);
    });
  }

  async stop(slug: string, report: StepReporter): Promise<void> {
    assertSlug(slug);
    const rec = await readRecord(this.layout.vmFile(slug, "vm.json"));
    if (!rec) return;
    await this.halt(rec, report);
    await discardSavedMemory(this.layout, slug);
    await writeRecord(this.layout.vmFile(slug, "vm.json"), { ...rec, pid: null, lifecycle: "stopped" });
  }

  /**
   * Pause, full snapshot into the jail, end the VMM, then commit the files to the box's dir
   * (hibernate.ts). A failure before the VMM ends resumes the guest; one after it leaves the
   * box exited with no saved memory, so a start boots its disks.
   */
  async hibernate(slug: string, report: StepReporter): Promise<{ memoryFileBytes: number }> {
    assertSlug(slug);
    const rec = await readRecord(this.layout.vmFile(slug, "vm.json"));
    const existing = await savedMemory(this.layout, slug);
    if (!rec?.pid || !(await this.d.processes.isAlive(rec.pid, rec.jailId))) {
      if (existing) return { memoryFileBytes: existing.bytes };
      throw new FirecrackerError(
        "not_running",
        `box ${slug} is not running: only a running box can hibernate`,
      );
    }
    const pid = rec.pid;
    const saved = await report.step("hibernate_vm", async () => {
      await discardSavedMemory(this.layout, slug);
      const client = new FirecrackerClient(this.layout.socket(rec.jailId), {
        timeoutMs: this.d.cfg.apiTimeoutMs,
      });
      try {
        await prepareSnapshotDir(this.layout, rec.jailId, rec.uid, rec.gid);
        await snapshotPaused(client);
      } catch (err) {
        await client.patchVm("Resumed").catch(() => undefined);
        throw err;
      }
      // Paused and saved: killed, not asked to shut down (it could not react anyway).
      await stopVmm(this.deps, rec.jailId, pid, false);
      try {
        return await commitSnapshot(this.layout, slug, rec.jailId, () => this.d.clock.now());
      } catch (err) {
        await discardSavedMemory(this.layout, slug);
        throw err;
      }
    });
    await writeRecord(this.layout.vmFile(slug, "vm.json"), { ...rec, pid: null, lifecycle: "stopped" });
    await report.step("teardown_network", async () => {
      await removeJail(this.deps, rec.jailId);
      if (rec.tap) await this.d.network.removeTap(rec.tap);
    });
    this.d.log.info({ slug, bytes: saved.bytes }, "box hibernated");
    return { memoryFileBytes: saved.bytes };
  }

  async memoryFileBytes(slug: string): Promise<number | null> {
    assertSlug(slug);
    return (await savedMemory(this.layout, slug))?.bytes ?? null;
  }

  /**
   * Loads the box's own snapshot paused with its TAP, drops the saved files (the disks move
   * on from here), gives it fresh metadata (new generation: the guest sets its clock again)
   * and resumes it.
   */
  private async resume(
    spec: VmSpec,
    rec: VmRecord,
    saved: SavedMemory,
    report: StepReporter,
    cleanup: CleanupStack,
  ): Promise<Upstream> {
    const tap = requireTap(spec);
    const updated: VmRecord = { ...rec, ip: spec.net.ip, tap, pid: null };
    await this.setupNetwork(spec, report, cleanup);
    await report.step("resume_vm", async () => {
      const files = [
        ...this.diskFiles(spec.slug),
        // The box's own files (root's at rest), handed to its VMM's uid to load.
        { host: saved.vmstate, inJail: IN_JAIL.vmstate, owned: true },
        { host: saved.mem, inJail: IN_JAIL.mem, owned: true },
      ];
      const launched = await this.launchBox(updated, saved.memoryMb, files, cleanup);
      await loadPaused(launched.client, tap);
      // The jail's links keep the files the VMM has mapped; the box's copies go now.
      await discardSavedMemory(this.layout, spec.slug);
      await applyIdentityAndResume(launched.client, mmdsPayload(spec.metadata), 0);
      await writeRecord(this.layout.vmFile(spec.slug, "vm.json"), {
        ...updated,
        lifecycle: "running",
        ready: false,
      });
    });
    await this.waitReady(spec, await this.readyPorts(spec.template), report);
    this.d.log.info({ slug: spec.slug }, "resumed from hibernation");
    return upstreamAt(spec.net.ip);
  }

  async remove(slug: string, report: StepReporter): Promise<void> {
    assertSlug(slug);
    const rec = await readRecord(this.layout.vmFile(slug, "vm.json"));
    if (rec) await this.halt(rec, report);
    await report.step("remove_disks", async () => {
      await removeJail(this.deps, rec?.jailId ?? boxJailId(slug));
      await rm(this.layout.vmDir(slug), { recursive: true, force: true });
      if (rec) await releaseUid(this.layout.uidsDir(), rec.uid, uidOwner(slug));
    });
  }

  async reset(spec: VmSpec, report: StepReporter): Promise<Upstream> {
    // Check first: a reset without a golden snapshot must not wipe the box.
    if (!(await currentGolden(this.deps, spec.template))) {
      throw new FirecrackerError("golden_missing", `no golden snapshot for template ${spec.template}`);
    }
    await this.remove(spec.slug, report);
    return this.createFromGolden(spec, report);
  }

  serialLogPath(slug: string): string {
    assertSlug(slug);
    return this.layout.vmFile(slug, "serial.log");
  }

  async inspect(slug: string): Promise<VmState> {
    assertSlug(slug);
    const rec = await readRecord(this.layout.vmFile(slug, "vm.json"));
    if (rec?.pid && (await this.d.processes.isAlive(rec.pid, rec.jailId))) return "running";
    if (rec && (await savedMemory(this.layout, slug))) return "hibernated";
    if (rec?.lifecycle === "stopped") return "stopped";
    return existsSync(this.layout.vmFile(slug, "rootfs.ext4")) ? "exited" : "gone";
  }

  async list(): Promise<Array<{ slug: string; state: VmState }>> {
    const names = await readdir(this.layout.vmsDir()).catch((err: NodeJS.ErrnoException) => {
      if (err.code === "ENOENT") return [] as string[];
      throw err;
    });
    const out: Array<{ slug: string; state: VmState }> = [];
    for (const slug of names.filter((n) => slugProblem(n) === null).sort()) {
      const state = await this.inspect(slug);
      if (state !== "gone") out.push({ slug, state });
    }
    return out;
  }

  /** Null until the guest has answered its ready ports (a box whose start is still waiting). */
  async upstream(slug: string): Promise<Upstream | null> {
    if ((await this.inspect(slug)) !== "running") return null;
    const rec = await readRecord(this.layout.vmFile(slug, "vm.json"));
    return rec && rec.ready !== false ? upstreamAt(rec.ip) : null;
  }

  buildGolden(template: TemplateSpec, report: StepReporter): Promise<GoldenInfo> {
    // One build per template at a time; restores never wait on it.
    const inFlight = this.goldenBuilds.get(template.name);
    if (inFlight) return inFlight;
    const build = buildGolden(this.deps, template, report).finally(() =>
      this.goldenBuilds.delete(template.name),
    );
    this.goldenBuilds.set(template.name, build);
    return build;
  }

  goldenStatus(template: string): Promise<GoldenInfo> {
    return goldenStatus(this.deps, template, this.goldenBuilds.has(template));
  }

  async close(): Promise<void> {
    // No long-lived handles: API clients open a connection per call.
  }

  /**
   * A create retried after an agent crash: a box whose create had got as far as its guest
   * (running, stopped or crashed since) is started (start() waits for a guest not yet
   * ready), never wiped; only leftovers of an unfinished create are removed, its VMM too.
   */
  private async prepareCreate(slug: string): Promise<"fresh" | "exists"> {
    assertSlug(slug);
    const state = await this.inspect(slug);
    const rec = await readRecord(this.layout.vmFile(slug, "vm.json"));
    if (rec && rec.lifecycle !== "creating" && state !== "gone") return "exists";
    if (rec || existsSync(this.layout.vmDir(slug))) {
      if (rec?.pid) await stopVmm(this.deps, rec.jailId, rec.pid);
      if (rec?.tap) await this.d.network.removeTap(rec.tap);
      await removeJail(this.deps, boxJailId(slug));
      await rm(this.layout.vmDir(slug), { recursive: true, force: true });
      if (rec) await releaseUid(this.layout.uidsDir(), rec.uid, uidOwner(slug));
    }
    return "fresh";
  }

  private async newRecord(
    spec: VmSpec,
    goldenBuild: string | null,
    cleanup: CleanupStack,
  ): Promise<VmRecord> {
    const uid = await claimUid(
      this.layout.uidsDir(),
      uidOwner(spec.slug),
      this.d.cfg.uidBase,
      this.d.cfg.uidCount,
    );
    cleanup.push("release uid", () => releaseUid(this.layout.uidsDir(), uid, uidOwner(spec.slug)));
    await makeDirs(this.layout.vmDir(spec.slug), 0o700);
    cleanup.push("remove vm dir", () => rm(this.layout.vmDir(spec.slug), { recursive: true, force: true }));
    await touchLogs([
      this.layout.vmFile(spec.slug, "firecracker.log"),
      this.layout.vmFile(spec.slug, "metrics.json"),
    ]);
    const rec: VmRecord = {
      slug: spec.slug,
      jailId: boxJailId(spec.slug),
      uid,
      gid: uid,
      ip: spec.net.ip,
      tap: spec.net.tap,
      template: spec.template,
      goldenBuild,
      pid: null,
      lifecycle: "creating",
    };
    await writeRecord(this.layout.vmFile(spec.slug, "vm.json"), rec);
    return rec;
  }

  private diskFiles(slug: string): JailFile[] {
    return [
      { host: this.layout.vmFile(slug, "rootfs.ext4"), inJail: IN_JAIL.rootfs, owned: true },
      { host: this.layout.vmFile(slug, "volume.ext4"), inJail: IN_JAIL.volume, owned: true },
      { host: this.layout.vmFile(slug, "firecracker.log"), inJail: IN_JAIL.log, owned: true },
      { host: this.layout.vmFile(slug, "metrics.json"), inJail: IN_JAIL.metrics, owned: true },
    ];
  }

  private async setupNetwork(spec: VmSpec, report: StepReporter, cleanup: CleanupStack): Promise<void> {
    const tap = requireTap(spec);
    // The bridge and firewall exist since the agent started (and reconcile repairs them).
    await report.step("setup_network", () => this.d.network.createTap(tap, spec.net));
    cleanup.push("remove tap", () => this.d.network.removeTap(tap));
  }

  /** Spawns the VMM and records its pid at once, so a crash right after still finds it. */
  private async launchBox(rec: VmRecord, memoryMb: number, files: JailFile[], cleanup: CleanupStack) {
    cleanup.push("remove jail", () => removeJail(this.deps, rec.jailId));
    const launched = await launch(this.deps, {
      jailId: rec.jailId,
      uid: rec.uid,
      gid: rec.gid,
      memoryMb,
      files,
      serialLog: this.layout.vmFile(rec.slug, "serial.log"),
    });
    cleanup.push("stop vmm", () => stopVmm(this.deps, rec.jailId, launched.pid));
    this.vmmOf.set(cleanup, { pid: launched.pid, jailId: rec.jailId });
    Object.assign(rec, { pid: launched.pid });
    await writeRecord(this.layout.vmFile(rec.slug, "vm.json"), rec);
    return launched;
  }

  private async bootFromDisks(
    spec: VmSpec,
    rec: VmRecord,
    report: StepReporter,
    cleanup: CleanupStack,
  ): Promise<Upstream> {
    await touchLogs([
      this.layout.vmFile(spec.slug, "firecracker.log"),
      this.layout.vmFile(spec.slug, "metrics.json"),
    ]);
    await this.setupNetwork(spec, report, cleanup);
    await report.step("boot_vm", async () => {
      const files = [
        { host: this.d.cfg.kernelPath, inJail: IN_JAIL.kernel, owned: false },
        ...this.diskFiles(spec.slug),
      ];
      const { client } = await this.launchBox(rec, spec.memoryMb, files, cleanup);
      const dev = {
        vcpu: spec.vcpu,
        memoryMb: spec.memoryMb,
        mac: spec.net.mac,
        tap: requireTap(spec),
        balloon: false,
      };
      await configureAndBoot(client, this.d.cfg, dev, mmdsPayload(spec.metadata));
      await writeRecord(this.layout.vmFile(spec.slug, "vm.json"), {
        ...rec,
        lifecycle: "running",
        ready: false,
      });
    });
    await this.waitReady(spec, await this.readyPorts(spec.template), report);
    return upstreamAt(spec.net.ip);
  }

  /** The template's ready ports: its golden's, or the default for a template without one. */
  private async readyPorts(template: string): Promise<number[]> {
    return (await currentGolden(this.deps, template))?.info.readyPorts ?? this.d.cfg.defaultReadyPorts;
  }

  /** The wait_ready step, then the record says the guest is ready (upstream() serves it). */
  private async waitReady(spec: VmSpec, ports: number[], report: StepReporter): Promise<void> {
    const file = this.layout.vmFile(spec.slug, "vm.json");
    const vmm = await readRecord(file);
    const alive = async () => (vmm?.pid ? this.d.processes.isAlive(vmm.pid, vmm.jailId) : true);
    await report.step("wait_ready", () =>
      this.d.probe.waitForPorts(spec.net.ip, ports, this.d.cfg.readyTimeoutMs, alive),
    );
    const rec = await readRecord(file);
    if (rec) await writeRecord(file, { ...rec, ready: true });
  }

  private async halt(rec: VmRecord, report: StepReporter): Promise<void> {
    await report.step("stop_vm", async () => {
      if (rec.pid) await stopVmm(this.deps, rec.jailId, rec.pid);
      await removeJail(this.deps, rec.jailId);
    });
    await report.step("teardown_network", async () => {
      if (rec.tap) await this.d.network.removeTap(rec.tap);
    });
  }

  /**
   * Runs setup; on failure undoes what was registered, in reverse, and rethrows. A failure
   * after its VMM died (an API call to a killed process) is that VMM's exit: `vmm_exited`.
   */
  private async guarded<T>(fn: (cleanup: CleanupStack) => Promise<T>): Promise<T> {
    const cleanup = new CleanupStack();
    try {
      const out = await fn(cleanup);
      cleanup.release();
      return out;
    } catch (err) {
      const vmm = this.vmmOf.get(cleanup);
      const exited =
        vmm &&
        !(err instanceof FirecrackerError && err.code === "vmm_exited") &&
        !(await this.d.processes.isAlive(vmm.pid, vmm.jailId));
      for (const problem of await cleanup.run())
        this.d.log.warn({ err: problem }, "cleanup after failed action");
      if (exited) {
        throw new FirecrackerError(
          "vmm_exited",
          `the VMM exited before the guest was ready: ${(err as Error).message}`,
          {
            cause: err,
          },
        );
      }
      throw err;
    }
  }

  /** `guarded`, launched again when its VMM exits before the guest is ready (vmm/relaunch.ts). */
  private relaunching<T>(
    spec: VmSpec,
    report: StepReporter,
    fn: (cleanup: CleanupStack) => Promise<T>,
  ): Promise<T> {
    return launchWithRelaunch({
      slug: spec.slug,
      report,
      log: this.d.log,
      // Each attempt's own cleanup stack undoes it (guarded).
      launch: () => this.guarded(fn),
      undo: async () => undefined,
      exited: (err) => err instanceof FirecrackerError && err.code === "vmm_exited",
      gaveUp: (message, last) => new FirecrackerError("guest_not_ready", message, { cause: last }),
    });
  }
}

function uidOwner(slug: string): string {
  return `box:${slug}`;
}

function assertSlug(slug: string): void {
  const problem = slugProblem(slug);
  if (problem) throw new FirecrackerError("unsupported", `invalid slug ${JSON.stringify(slug)}: ${problem}`);
}

function requireTap(spec: VmSpec): string {
  assertSlug(spec.slug);
  if (!spec.net.tap)
    throw new FirecrackerError("unsupported", "Firecracker needs a TAP device; spec.net.tap is null");
  return spec.net.tap;
}
