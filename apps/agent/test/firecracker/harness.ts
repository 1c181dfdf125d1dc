import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import type { StepName } from "@doppio/contracts";
import { pino } from "pino";
import type { BoxMetadata, GuestAddress, HostNetwork, StepReporter, VmSpec } from "../../src/vmm/executor.ts";
import { type FirecrackerConfig, firecrackerConfig } from "../../src/vmm/firecracker/config.ts";
import { FirecrackerError } from "../../src/vmm/firecracker/errors.ts";
import { FirecrackerExecutor, resolveExecName } from "../../src/vmm/firecracker/executor.ts";
import type { ReadinessProbe } from "../../src/vmm/firecracker/golden.ts";
import type { SpawnRequest, VmmProcesses } from "../../src/vmm/firecracker/process.ts";
import type { ContractValidator } from "./contract.ts";
import { FakeFirecracker, type RecordedRequest } from "./fake-firecracker.ts";

function argValue(args: string[], flag: string): string {
  const i = args.indexOf(flag);
  if (i < 0 || i + 1 >= args.length) throw new Error(`jailer args lack ${flag}: ${args.join(" ")}`);
  return args[i + 1]!;
}

interface Spawned extends SpawnRequest {
  pid: number;
  jailId: string;
  fake: FakeFirecracker;
}

/**
 * Plays the jailer: checks the command line the way the jailer would (id charset, exec
 * file name, uid/gid numbers, `--` before Firecracker's args), then starts a contract
 * server on the socket path the jailed Firecracker would create.
 */
class FakeProcesses implements VmmProcesses {
  readonly spawned: Spawned[] = [];
  private readonly alive = new Set<number>();
  private nextPid = 4_000_000;

  constructor(
    private readonly validator: ContractValidator,
    private readonly gate?: (req: RecordedRequest, jailId: string) => Promise<void>,
  ) {}

  async spawn(req: SpawnRequest): Promise<{ pid: number }> {
    const id = argValue(req.args, "--id");
    if (!/^[A-Za-z0-9-]{1,64}$/.test(id)) throw new Error(`jailer rejects id ${id}`);
    const exec = argValue(req.args, "--exec-file");
    if (!path.basename(exec).includes("firecracker")) throw new Error(`jailer rejects exec file ${exec}`);
    const uid = Number(argValue(req.args, "--uid"));
    if (!Number.isInteger(uid) || !Number.isInteger(Number(argValue(req.args, "--gid"))))
      throw new Error("bad uid/gid");
    const sep = req.args.indexOf("--");
    if (sep < 0) throw new Error("no -- before firecracker args");
    const apiSock = argValue(req.args.slice(sep), "--api-sock");
    const root = path.join(argValue(req.args, "--chroot-base-dir"), path.basename(exec), id, "root");
    // What the jailer creates inside the chroot before exec.
    mkdirSync(path.join(root, "run"), { recursive: true });
    const pid = this.nextPid++;
    const gate = this.gate;
    const fake = await FakeFirecracker.listen(path.join(root, apiSock), this.validator, {
      id,
      jail: { root, uid },
      onCtrlAltDel: () => void this.exit(pid),
      ...(gate ? { gate: (r: RecordedRequest) => gate(r, id) } : {}),
    });
    this.spawned.push({ ...req, pid, jailId: id, fake });
    this.alive.add(pid);
    return { pid };
  }

  async isAlive(pid: number, jailId: string): Promise<boolean> {
    return this.alive.has(pid) && this.spawned.some((s) => s.pid === pid && s.jailId === jailId);
  }

  async kill(pid: number): Promise<void> {
    await this.exit(pid);
  }

  /** The VMM dies (crash, kill, guest reboot). */
  async exit(pid: number): Promise<void> {
    if (!this.alive.delete(pid)) return;
    await this.spawned.find((s) => s.pid === pid)?.fake.close();
  }

  forJail(jailId: string): Spawned[] {
    return this.spawned.filter((s) => s.jailId === jailId);
  }

  async closeAll(): Promise<void> {
    for (const pid of [...this.alive]) await this.exit(pid);
  }
}

class RecordingNetwork implements HostNetwork {
  readonly calls: string[] = [];
  readonly taps = new Set<string>();
  async ensureBridge(): Promise<void> {
    this.calls.push("ensureBridge");
  }
  async createTap(tap: string, guest: GuestAddress): Promise<void> {
    this.calls.push(`createTap ${tap} ${guest.ip} ${guest.mac}`);
    this.taps.add(tap);
  }
  async removeTap(tap: string): Promise<void> {
    this.calls.push(`removeTap ${tap}`);
    this.taps.delete(tap);
  }
  async listTaps(): Promise<string[]> {
    return [...this.taps];
  }
  async teardown(): Promise<void> {
    this.calls.push("teardown");
    this.taps.clear();
  }
}

class RecordingProbe implements ReadinessProbe {
  readonly calls: Array<{ ip: string; ports: number[] }> = [];
  /** While set, probes wait for it (a guest that is not ready yet). */
  hold: Promise<void> | null = null;
  /** Runs as a wait begins, before the guest could answer (a test kills the VMM there). */
  onWait: ((ip: string) => Promise<void>) | null = null;
  async waitForPorts(
    ip: string,
    ports: number[],
    _timeoutMs: number,
    alive?: () => Promise<boolean>,
  ): Promise<void> {
    this.calls.push({ ip, ports });
    await this.onWait?.(ip);
    await this.hold;
    // As TcpReadinessProbe: a guest whose VMM is gone never answers.
    if (alive && !(await alive())) throw new FirecrackerError("vmm_exited", `${ip}: the VMM exited`);
  }
}

export class RecordingReporter implements StepReporter {
  readonly steps: StepName[] = [];
  readonly lines: string[] = [];
  async step<T>(name: StepName, fn: () => Promise<T>): Promise<T> {
    this.steps.push(name);
    return fn();
  }
  log(line: string): void {
    this.lines.push(line);
  }
}

export interface Rig {
  dir: string;
  cfg: FirecrackerConfig;
  executor: FirecrackerExecutor;
  processes: FakeProcesses;
  network: RecordingNetwork;
  probe: RecordingProbe;
  cleanup(): Promise<void>;
}

/** A host layout in a temp dir: fake binaries, a kernel, a template image, a cgroup dir. */
export async function makeRig(
  validator: ContractValidator,
  gate?: (req: RecordedRequest, jailId: string) => Promise<void>,
): Promise<Rig> {
  const dir = mkdtempSync(path.join(tmpdir(), "fc-exec-"));
  for (const d of ["bin", "state/kernel", "state/images/frappe", "jails", "cgroup"]) {
    mkdirSync(path.join(dir, d), { recursive: true });
  }
  writeFileSync(path.join(dir, "bin/firecracker"), "not a real binary", { mode: 0o755 });
  writeFileSync(path.join(dir, "bin/jailer"), "not a real binary", { mode: 0o755 });
  writeFileSync(path.join(dir, "state/kernel/vmlinux"), "kernel", { mode: 0o644 });
  writeFileSync(path.join(dir, "state/images/frappe/rootfs.ext4"), Buffer.alloc(64 * 1024, 7), {
    mode: 0o644,
  });
  const cfg = firecrackerConfig({
    stateDir: path.join(dir, "state"),
    firecrackerBin: path.join(dir, "bin/firecracker"),
    jailerBin: path.join(dir, "bin/jailer"),
    chrootBase: path.join(dir, "jails"),
    cgroupRoot: path.join(dir, "cgroup"),
    golden: {
      memoryMb: 4096,
      volumeGb: 1,
      net: {
        ip: "10.0.255.254",
        prefix: 16,
        gateway: "10.0.0.1",
        mac: "06:00:0a:00:ff:fe",
        tap: "fc-golden",
        dns: ["1.1.1.1"],
      },
    },
    stopGraceMs: 2_000,
  });
  const processes = new FakeProcesses(validator, gate);
  const network = new RecordingNetwork();
  const probe = new RecordingProbe();
  const executor = new FirecrackerExecutor({
    cfg,
    network,
    processes,
    probe,
    clock: { now: () => Date.now(), sleep: (ms) => new Promise((r) => setTimeout(r, ms)) },
    log: pino({ level: "silent" }),
    execName: await resolveExecName(cfg.firecrackerBin),
  });
  return {
    dir,
    cfg,
    executor,
    processes,
    network,
    probe,
    async cleanup() {
      await processes.closeAll();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export function vmSpec(slug: string, n: number): VmSpec {
  const ip = `10.0.0.${10 + n}`;
  const mac = `06:00:0a:00:00:${(10 + n).toString(16).padStart(2, "0")}`;
  const metadata: BoxMetadata = {
    slug,
    site_url: `https://${slug}.site.test`,
    code_url: `https://${slug}.code.test`,
    env: { FOO: `bar-${n}` },
    network: { ip, prefix: 16, gateway: "10.0.0.1", mac, dns: ["1.1.1.1"] },
    metadata_url: "http://10.0.0.1:8169",
    secrets: {
      machine_id: `m${n}`,
      seed: `s${n}`,
      db_password: `d${n}`,
      encryption_key: `e${n}`,
      admin_password: `a${n}`,
      metadata_token: `t${n}`,
    },
    issued_at: 1_700_000_000_000 + n,
    generation: 1,
  };
  return {
    slug,
    template: "frappe",
    vcpu: 2,
    memoryMb: 2048,
    diskGb: 2,
    net: { ip, prefix: 16, gateway: "10.0.0.1", mac, tap: `fc-t${n}` },
    metadata,
  };
}

export const TEMPLATE = {
  name: "frappe",
  version: "v1",
  imageVersion: "v1",
  readyPorts: [8000, 8888],
  memoryMb: 2048,
  vcpu: 2,
};
