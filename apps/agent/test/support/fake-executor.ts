import { existsSync, readFileSync, renameSync, writeFileSync } from "node:fs";
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

  constructor(opts: FakeExecutorOptions = {}) {
    this.#opts = opts;
    this.#host = this.#load();
    for (const [name, status] of Object.entries(opts.golden ?? {})) {
      this.#host.golden[name] ??= golden(name, status);
    }
    this.#save();
  }

  /** Simulates a VMM that died (crash, OOM kill): disks stay, the process is gone. */
  kill(slug: string): void {
    const vm = this.#host.vms[slug];
    if (vm) vm.state = "exited";
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
    const vm = this.#host.vms[spec.slug];
    if (!vm) throw new Error(`box ${spec.slug} has no disks on this host`);
    const resume = vm.state === "hibernated";
    return this.#bring(spec, report, ["setup_network", resume ? "resume_vm" : "boot_vm", "wait_ready"]);
  }

  /** Saved memory of a fake box: a fixed size, so the control plane's view can be checked. */
  static readonly MEMORY_FILE_BYTES = 48 * 1024 * 1024;

  async hibernate(slug: string, report: StepReporter): Promise<{ memoryFileBytes: number }> {
    this.#record("hibernate", slug);
    const vm = this.#host.vms[slug];
    if (vm?.state === "hibernated") return { memoryFileBytes: FakeExecutor.MEMORY_FILE_BYTES };
    if (vm?.state !== "running") throw new Error(`box ${slug} is not running`);
    await this.#step(report, "hibernate_vm", () => {
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
      if (vm) vm.state = "stopped";
    });
    await this.#step(report, "teardown_network", () => this.#dropTap(slug));
  }

  async remove(slug: string, report: StepReporter): Promise<void> {
    this.#record("remove", slug);
    await this.#step(report, "stop_vm", () => {
      const vm = this.#host.vms[slug];
      if (vm) vm.state = "stopped";
    });
    await this.#step(report, "teardown_network", () => this.#dropTap(slug));
    await this.#step(report, "remove_disks", () => {
      delete this.#host.vms[slug];
    });
  }

  async reset(spec: VmSpec, report: StepReporter): Promise<Upstream> {
    this.#record("reset", spec.slug);
    await this.#step(report, "remove_disks", () => {
      delete this.#host.vms[spec.slug];
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
    return this.#host.vms[slug]?.state ?? "gone";
  }

  async list(): Promise<Array<{ slug: string; state: VmState }>> {
    return Object.entries(this.#host.vms)
      .map(([slug, vm]) => ({ slug, state: vm.state as VmState }))
      .sort((a, b) => a.slug.localeCompare(b.slug));
  }

  async upstream(slug: string): Promise<Upstream | null> {
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
    const existing = this.#host.vms[spec.slug];
    if (existing?.state === "running") return upstreamAt(existing.ip);
    for (const name of steps) {
      await this.#step(report, name, async () => {
        if (name === "setup_network" && spec.net.tap) await this.createTap(spec.net.tap, spec.net);
      });
    }
    this.#host.vms[spec.slug] = {
      state: "running",
      ip: spec.net.ip,
      tap: spec.net.tap,
      template: spec.template,
      generation: spec.metadata.generation,
      machineId: spec.metadata.secrets.machine_id,
    };
    this.#save();
    return upstreamAt(spec.net.ip);
  }

  async #step(report: StepReporter, name: StepName, fn: () => void | Promise<void>): Promise<void> {
    await report.step(name, async () => {
      if (this.#opts.stepDelayMs) await sleep(this.#opts.stepDelayMs);
      await fn();
      this.#save();
    });
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
