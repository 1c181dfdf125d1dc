import { spawn } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import type { StepName, VmState } from "@doppio/contracts";
import { sleep } from "../../src/clock.ts";
import type {
  Executor,
  GoldenInfo,
  GuestAddress,
  HostNetwork,
  StepReporter,
  TemplateSpec,
  Upstream,
  VmSpec,
} from "../../src/vmm/executor.ts";

interface FakeVm {
  state: Exclude<VmState, "gone">;
  ip: string;
  tap: string | null;
  template: string;
  generation: number;
  /** Secrets the "guest" received, so tests can check every clone got fresh ones. */
  machineId: string;
  /** The OS process standing for this VM's VMM while it runs (`vmmProcesses`). */
  pid?: number;
}

interface FakeHost {
  vms: Record<string, FakeVm>;
  golden: Record<string, GoldenInfo>;
  taps: string[];
}

export interface FakeExecutorOptions {
  /** Time each executor step takes (to put a job "in the middle" for crash tests). */
  stepDelayMs?: number;
  /** Persist the fake host in this JSON file, so a restarted agent process sees the same VMs. */
  stateFile?: string;
  golden?: Record<string, "missing" | "ready">;
  /** Where the fake's "serial logs" live (`<dir>/<slug>.log`, written by tests); none without it. */
  serialDir?: string;
  /**
   * Each running VM has an OS process standing for its VMM (`sleep`, named FAKE_VMM_NAME,
   * detached like a daemonized QEMU, so it outlives an agent crash). A VM whose process
   * died (kill -9) reports `exited`; stop, hibernate and remove end it.
   */
  vmmProcesses?: boolean;
  /**
   * Where each box's "disk" lives (`<disksDir>/<slug>.img`, DISK_BYTES written for real at
   * prepare_disks), so a full filesystem fails creates with ENOSPC as a real backend would.
   */
  disksDir?: string;
}

/** The argv[0] of a fake VMM process, so it is told apart from a recycled PID. */
const FAKE_VMM_NAME = "doppio-fake-vmm";
/** Bytes of a fake box's disk file. */
export const FAKE_DISK_BYTES = 256 * 1024;

/** Whether `pid` is a live (not zombie) fake VMM process. */
export function fakeVmmAlive(pid: number): boolean {
  try {
    const cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8");
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
    return cmdline.startsWith(`${FAKE_VMM_NAME}\0`) && state !== "Z";
  } catch {
    return false;
  }
}

/** Why the fake's next golden builds fail; each failure is used once. */
export interface GoldenFailure {
  template: string;
  message: string;
}

/**
 * A recording test double of the Executor + HostNetwork interfaces, faithful to their
 * contracts: every action checks the current state first and is harmless to repeat; stop
 * keeps disks; remove deletes everything; inspect/list report what exists. Tests hand it to
 * the agent in place of a real backend (agent-harness.ts in process, fake-agent-main.ts as
 * a process).
 */
export class FakeExecutor implements Executor, HostNetwork {
  readonly backend = "qemu" as const;
  readonly calls: Array<{ method: string; slug?: string }> = [];
  /** The next golden builds of these templates fail at snapshot_vm (like a VM that never got ready). */
  readonly goldenFailures: GoldenFailure[] = [];
  /** While set, golden builds wait for it before they start (to observe the host just before). */
  goldenGate: Promise<void> | null = null;
  readonly #opts: FakeExecutorOptions;
  #host: FakeHost;
  /** VMM processes spawned but not yet committed (still the shell): not dead. */
  readonly #starting = new Set<number>();

  constructor(opts: FakeExecutorOptions = {}) {
    this.#opts = opts;
    this.#host = this.#load();
    for (const [name, status] of Object.entries(opts.golden ?? {})) {
      this.#host.golden[name] ??= golden(name, status);
    }
    this.#save();
  }

  /** Running boxes whose VMM paused the guest on a disk write error (QEMU's werror=enospc). */
  readonly #ioPaused = new Set<string>();

  /** Simulates a guest paused on a full disk: it stays so until resumeIfIoPaused. */
  pauseOnIoError(slug: string): void {
    this.#ioPaused.add(slug);
  }

  async resumeIfIoPaused(slug: string): Promise<boolean> {
    return this.#ioPaused.delete(slug);
  }

  isIoPaused(slug: string): boolean {
    return this.#ioPaused.has(slug);
  }

  /** Starts of these boxes wait for their release (a guest whose boot takes long). */
  readonly #startGates = new Map<string, Promise<void>>();

  /** Holds the next starts of `slug` until the returned function is called. */
  holdStarts(slug: string): () => void {
    let release!: () => void;
    this.#startGates.set(slug, new Promise<void>((r) => (release = r)));
    return () => {
      this.#startGates.delete(slug);
      release();
    };
  }

  /**
   * The next hibernate or start of a box fails with the error given: a hibernate at its save,
   * the VM running on (a save that met a full disk); a start at its boot, the VM staying down.
   */
  readonly #failures = new Map<string, Error>();

  failNext(op: "hibernate" | "start", slug: string, err: Error): void {
    this.#failures.set(`${op} ${slug}`, err);
  }

  #takeFailure(op: "hibernate" | "start", slug: string): Error | undefined {
    const failure = this.#failures.get(`${op} ${slug}`);
    this.#failures.delete(`${op} ${slug}`);
    return failure;
  }

  /** Simulates a VMM that died (crash, OOM kill): disks stay, the process is gone. */
  kill(slug: string): void {
    const vm = this.#host.vms[slug];
    if (vm) {
      this.#endVmm(vm);
      vm.state = "exited";
    }
    this.#save();
  }

  vm(slug: string): Readonly<FakeVm> | undefined {
    return this.#host.vms[slug];
  }

  /** Leaves a VM behind that no box owns (for reconcile tests). */
  plantOrphan(slug: string, ip: string): void {
    this.#host.vms[slug] = {
      state: "running",
      ip,
      tap: null,
      template: "minimal",
      generation: 1,
      machineId: "orphan",
    };
    this.#save();
  }

  plantTap(tap: string): void {
    if (!this.#host.taps.includes(tap)) this.#host.taps.push(tap);
    this.#save();
  }

  async createFromGolden(spec: VmSpec, report: StepReporter): Promise<Upstream> {
    this.#record("createFromGolden", spec.slug);
    const g = this.#host.golden[spec.template];
    if (g?.status !== "ready") throw new Error(`no ready golden snapshot for ${spec.template}`);
    return this.#bring(spec, report, [
      "prepare_disks",
      "setup_network",
      "restore_vm",
      "apply_identity",
      "wait_ready",
    ]);
  }

  async createColdBoot(spec: VmSpec, report: StepReporter): Promise<Upstream> {
    this.#record("createColdBoot", spec.slug);
    return this.#bring(spec, report, [
      "prepare_disks",
      "setup_network",
      "boot_vm",
      "apply_identity",
      "wait_ready",
    ]);
  }

  async start(spec: VmSpec, report: StepReporter): Promise<Upstream> {
    this.#record("start", spec.slug);
    await this.#startGates.get(spec.slug);
    const vm = this.#host.vms[spec.slug];
    if (!vm) throw new Error(`box ${spec.slug} has no disks on this host`);
    const resume = vm.state === "hibernated";
    const failure = this.#takeFailure("start", spec.slug);
    if (failure) {
      await this.#step(report, resume ? "resume_vm" : "boot_vm", () => {
        throw failure;
      });
    }
    return this.#bring(spec, report, ["setup_network", resume ? "resume_vm" : "boot_vm", "wait_ready"]);
  }

  /** Saved memory of a fake box: a fixed size, so the control plane's view can be checked. */
  static readonly MEMORY_FILE_BYTES = 48 * 1024 * 1024;

  async hibernate(slug: string, report: StepReporter): Promise<{ memoryFileBytes: number }> {
    this.#record("hibernate", slug);
    const vm = this.#host.vms[slug];
    if (vm?.state === "hibernated") return { memoryFileBytes: FakeExecutor.MEMORY_FILE_BYTES };
    if (vm?.state !== "running") throw new Error(`box ${slug} is not running`);
    const failure = this.#takeFailure("hibernate", slug);
    await this.#step(report, "hibernate_vm", () => {
      if (failure) throw failure;
      this.#endVmm(vm);
      vm.state = "hibernated";
    });
    await this.#step(report, "teardown_network", () => this.#dropTap(slug));
    return { memoryFileBytes: FakeExecutor.MEMORY_FILE_BYTES };
  }

  async memoryFileBytes(slug: string): Promise<number | null> {
    return this.#host.vms[slug]?.state === "hibernated" ? FakeExecutor.MEMORY_FILE_BYTES : null;
  }

  async stop(slug: string, report: StepReporter): Promise<void> {
    this.#record("stop", slug);
    await this.#step(report, "stop_vm", () => {
      const vm = this.#host.vms[slug];
      if (vm) {
        this.#endVmm(vm);
        vm.state = "stopped";
      }
    });
    await this.#step(report, "teardown_network", () => this.#dropTap(slug));
  }

  async remove(slug: string, report: StepReporter): Promise<void> {
    this.#record("remove", slug);
    await this.#step(report, "stop_vm", () => {
      const vm = this.#host.vms[slug];
      if (vm) {
        this.#endVmm(vm);
        vm.state = "stopped";
      }
    });
    await this.#step(report, "teardown_network", () => this.#dropTap(slug));
    await this.#step(report, "remove_disks", () => {
      delete this.#host.vms[slug];
      this.#removeDisk(slug);
    });
  }

  async reset(spec: VmSpec, report: StepReporter): Promise<Upstream> {
    this.#record("reset", spec.slug);
    await this.#step(report, "remove_disks", () => {
      const vm = this.#host.vms[spec.slug];
      if (vm) this.#endVmm(vm);
      delete this.#host.vms[spec.slug];
      this.#removeDisk(spec.slug);
    });
    return this.#bring(spec, report, [
      "prepare_disks",
      "setup_network",
      "restore_vm",
      "apply_identity",
      "wait_ready",
    ]);
  }

  serialLogPath(slug: string): string | null {
    return this.#opts.serialDir ? `${this.#opts.serialDir}/${slug}.log` : null;
  }

  async inspect(slug: string): Promise<VmState> {
    this.#noticeDeadVmms();
    return this.#host.vms[slug]?.state ?? "gone";
  }

  async list(): Promise<Array<{ slug: string; state: VmState }>> {
    this.#noticeDeadVmms();
    return Object.entries(this.#host.vms)
      .map(([slug, vm]) => ({ slug, state: vm.state as VmState }))
      .sort((a, b) => a.slug.localeCompare(b.slug));
  }

  async upstream(slug: string): Promise<Upstream | null> {
    this.#noticeDeadVmms();
    const vm = this.#host.vms[slug];
    return vm?.state === "running" ? upstreamAt(vm.ip) : null;
  }

  async buildGolden(template: TemplateSpec, report: StepReporter): Promise<GoldenInfo> {
    this.#record("buildGolden", template.name);
    await this.goldenGate;
    const previous = this.#host.golden[template.name];
    this.#host.golden[template.name] = {
      ...golden(template.name, "missing"),
      status: "building",
      version: template.version,
    };
    const failure = this.goldenFailures.findIndex((f) => f.template === template.name);
    try {
      for (const name of ["build_rootfs", "boot_vm", "wait_ready", "snapshot_vm"] as const) {
        await this.#step(report, name, () => {
          if (name === "snapshot_vm" && failure >= 0) {
            const [f] = this.goldenFailures.splice(failure, 1);
            throw new Error(f!.message);
          }
        });
      }
    } catch (err) {
      // Like the real backends: a failed rebuild keeps the previous build in use.
      this.#host.golden[template.name] =
        previous?.status === "ready"
          ? previous
          : { ...golden(template.name, "missing"), status: "failed", error: (err as Error).message };
      this.#save();
      throw err;
    }
    const info: GoldenInfo = {
      template: template.name,
      version: template.version,
      status: "ready",
      builtAt: new Date().toISOString(),
      error: null,
      imageVersion: template.imageVersion,
    };
    this.#host.golden[template.name] = info;
    this.#save();
    return info;
  }

  async goldenStatus(template: string): Promise<GoldenInfo> {
    return this.#host.golden[template] ?? golden(template, "missing");
  }

  async close(): Promise<void> {}

  // HostNetwork
  async ensureBridge(): Promise<void> {}
  async createTap(tap: string, _guest?: GuestAddress): Promise<void> {
    if (!this.#host.taps.includes(tap)) this.#host.taps.push(tap);
    this.#save();
  }
  async removeTap(tap: string): Promise<void> {
    this.#record("removeTap", tap);
    this.#host.taps = this.#host.taps.filter((t) => t !== tap);
    this.#save();
  }
  async listTaps(): Promise<string[]> {
    return [...this.#host.taps];
  }
  async teardown(): Promise<void> {
    this.#host.taps = [];
    this.#save();
  }

  async #bring(spec: VmSpec, report: StepReporter, steps: readonly StepName[]): Promise<Upstream> {
    this.#noticeDeadVmms();
    const existing = this.#host.vms[spec.slug];
    if (existing?.state === "running") return upstreamAt(existing.ip);
    for (const name of steps) {
      await this.#step(report, name, async () => {
        if (name === "setup_network" && spec.net.tap) await this.createTap(spec.net.tap, spec.net);
        if (name === "prepare_disks") this.#writeDisk(spec.slug);
      });
    }
    const vm: FakeVm = {
      state: "running",
      ip: spec.net.ip,
      tap: spec.net.tap,
      template: spec.template,
      generation: spec.metadata.generation,
      machineId: spec.metadata.secrets.machine_id,
    };
    this.#host.vms[spec.slug] = vm;
    if (this.#opts.vmmProcesses) {
      const vmm = startVmm();
      vm.pid = vmm.pid;
      this.#starting.add(vmm.pid);
      try {
        this.#save();
        await vmm.commit();
      } finally {
        this.#starting.delete(vmm.pid);
      }
    } else this.#save();
    return upstreamAt(spec.net.ip);
  }

  async #step(report: StepReporter, name: StepName, fn: () => void | Promise<void>): Promise<void> {
    await report.step(name, async () => {
      if (this.#opts.stepDelayMs) await sleep(this.#opts.stepDelayMs);
      await fn();
      this.#save();
    });
  }

  /** A VM whose VMM process died (kill -9, OOM) is `exited`, as a real backend sees it. */
  #noticeDeadVmms(): void {
    let changed = false;
    for (const vm of Object.values(this.#host.vms)) {
      if (vm.pid === undefined || this.#starting.has(vm.pid)) continue;
      if (vm.state === "running" && !fakeVmmAlive(vm.pid)) {
        vm.state = "exited";
        delete vm.pid;
        changed = true;
      }
    }
    if (changed) this.#save();
  }

  #endVmm(vm: FakeVm): void {
    if (vm.pid !== undefined && fakeVmmAlive(vm.pid)) process.kill(vm.pid, "SIGKILL");
    delete vm.pid;
  }

  #writeDisk(slug: string): void {
    const dir = this.#opts.disksDir;
    if (!dir) return;
    mkdirSync(dir, { recursive: true });
    const file = path.join(dir, `${slug}.img`);
    try {
      writeFileSync(file, Buffer.alloc(FAKE_DISK_BYTES, 1));
    } catch (err) {
      // Like qemu-img on a full disk: no half-written image is left behind.
      rmSync(file, { force: true });
      throw err;
    }
  }

  #removeDisk(slug: string): void {
    if (this.#opts.disksDir) rmSync(path.join(this.#opts.disksDir, `${slug}.img`), { force: true });
  }

  #dropTap(slug: string): void {
    const tap = this.#host.vms[slug]?.tap;
    if (tap) this.#host.taps = this.#host.taps.filter((t) => t !== tap);
  }

  #record(method: string, slug?: string): void {
    this.calls.push(slug === undefined ? { method } : { method, slug });
  }

  #load(): FakeHost {
    const file = this.#opts.stateFile;
    if (file && existsSync(file)) return JSON.parse(readFileSync(file, "utf8")) as FakeHost;
    return { vms: {}, golden: {}, taps: [] };
  }

  #save(): void {
    const file = this.#opts.stateFile;
    if (!file) return;
    writeFileSync(`${file}.tmp`, JSON.stringify(this.#host));
    renameSync(`${file}.tmp`, file);
  }
}

/**
 * A stand-in VMM: detached, so it outlives the agent process like a daemonized QEMU. It
 * starts as a shell that waits for `commit()` (called once its PID is saved) before it
 * becomes the fake VMM; if the agent dies between the spawn and the save, the shell reads
 * end-of-file and exits. A real VMM cannot be lost there either: QEMU writes its own pid
 * file into the box directory, whose record the agent wrote before the spawn.
 */
function startVmm(): { pid: number; commit(): Promise<void> } {
  const child = spawn("bash", ["-c", `read -r _ && exec -a ${FAKE_VMM_NAME} sleep infinity`], {
    detached: true,
    stdio: ["pipe", "ignore", "ignore"],
  });
  child.unref();
  const pid = child.pid;
  if (pid === undefined) throw new Error("could not start the fake VMM process");
  return {
    pid,
    async commit() {
      child.stdin!.end("go\n");
      // Until the shell has exec'd: before, the PID does not look like a live VMM.
      for (let i = 0; !fakeVmmAlive(pid); i++) {
        if (i === 500) throw new Error(`fake VMM ${pid} did not start`);
        await sleep(10);
      }
    },
  };
}

const upstreamAt =
  (ip: string): Upstream =>
  (port) =>
    `${ip}:${port}`;

function golden(template: string, status: "missing" | "ready"): GoldenInfo {
  return {
    template,
    version: "1",
    status,
    builtAt: status === "ready" ? new Date(0).toISOString() : null,
    error: null,
    imageVersion: status === "ready" ? "1" : null,
  };
}
