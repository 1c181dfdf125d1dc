/**
 * What the QEMU benches share: their own netns + bridge, executors on the minimal image
 * (test/qemu/support.ts) or the code template's, a fresh slug and address per box, a site
 * probe and percentiles.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { findTemplate, type TemplateDescriptor } from "@doppio/contracts";
import pino from "pino";
import { buildImage } from "../src/images/builder.ts";
import { ImageStore } from "../src/images/store.ts";
import { LinuxHostNetwork } from "../src/net/host-network.ts";
import { numToIp } from "../src/net/ipv4.ts";
import type { StepReporter } from "../src/vmm/executor.ts";
import { QemuExecutor, type QemuExecutorConfig } from "../src/vmm/qemu/executor.ts";
import { BUILD_CACHE_DIR, IMAGE_STORE_DIR, imageBuildUnavailable } from "../test/images/support.ts";
import {
  GOLDEN_NET,
  IMAGES_DIR,
  qemuUnavailable,
  REPO,
  type RecordingReporter,
} from "../test/qemu/support.ts";
import { netnsUnavailable, TestNetns } from "../test/support/netns.ts";

const exec = promisify(execFile);

/**
 * The code template's image, built once and cached by its inputs (.data/template-images), or
 * why it cannot be built here (it needs mmdebstrap and code-server from npm; BENCH_CODE=0).
 */
export async function buildCodeImage(): Promise<BuiltImage | string> {
  const why = process.env.BENCH_CODE === "0" ? "BENCH_CODE=0" : imageBuildUnavailable();
  if (why) return why;
  const template = findTemplate("code")!;
  const at = performance.now();
  const built = await buildImage(template, quiet, {
    repoDir: REPO,
    store: new ImageStore(IMAGE_STORE_DIR),
    log: pino({ level: "warn" }),
    env: { DOPPIO_IMAGE_CACHE: BUILD_CACHE_DIR },
  });
  return { template, version: built.version, cached: built.cached, buildMs: performance.now() - at };
}

export interface BuiltImage {
  template: TemplateDescriptor;
  version: string;
  cached: boolean;
  buildMs: number;
}

/** The golden snapshot of an image buildCodeImage built; throws unless it is ready. */
export async function buildGolden(ex: QemuExecutor, image: BuiltImage): Promise<void> {
  const t = image.template;
  const g = await ex.buildGolden(
    {
      name: t.name,
      version: image.version,
      imageVersion: image.version,
      readyPorts: t.readyPorts,
      memoryMb: t.memoryMb,
      vcpu: t.vcpu,
    },
    quiet,
  );
  if (g.status !== "ready") throw new Error(`${t.name} golden: ${g.status}`);
}

/** Steps run without being reported. */
export const quiet: StepReporter = { step: (_name, fn) => fn(), log: () => {} };

/** Exits with 2 and why when this machine cannot run a QEMU bench (root, QEMU, iproute2). */
export function requireQemuBench(name: string): void {
  const missing = netnsUnavailable() ?? qemuUnavailable();
  if (!missing) return;
  console.error(`${name} needs root, QEMU and iproute2: ${missing}`);
  process.exit(2);
}

/** The `p`th percentile (nearest rank) of `xs`. */
export function percentile(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
}

/**
 * A restore's time to READY (its restore_vm and wait_ready steps) and that time's phases:
 * from the start of restore_vm to each mark (StepReporter.mark: the agent's own, and the
 * guest's console markers as `guest_*`, timed when the agent reads them) and to READY seen
 * (the end of wait_ready), each phase ending at its mark.
 */
export function restorePhases(report: RecordingReporter): { ms: number; phases: Map<string, number> } {
  const steps = report.steps.filter((s) => s.name === "restore_vm" || s.name === "wait_ready");
  const ms = steps.reduce((sum, s) => sum + s.ms, 0);
  const start = steps.find((s) => s.name === "restore_vm")?.at ?? 0;
  const end = steps.find((s) => s.name === "wait_ready")?.end ?? start;
  const phases = new Map<string, number>();
  let prev = start;
  for (const m of [...report.marks.filter((m) => m.at >= start), { event: "ready_seen", at: end }]) {
    if (phases.has(m.event)) continue;
    phases.set(m.event, m.at - prev);
    prev = m.at;
  }
  return { ms, phases };
}

export class QemuBench {
  readonly ns: TestNetns;
  readonly net: LinuxHostNetwork;
  readonly #dirs: string[] = [];
  #nextHost = 10;
  #seq = 0;

  /** A netns named from `prefix` with the box bridge in it. */
  constructor(readonly prefix: string) {
    this.ns = TestNetns.create(prefix);
    this.net = new LinuxHostNetwork({ bridge: "br-devbox", cidr: "10.0.0.0/16", netns: this.ns.name });
  }

  /** An executor in its own temporary data dir, on this bench's bridge. */
  executor(extra: Partial<QemuExecutorConfig> = {}): { ex: QemuExecutor; dataDir: string } {
    const dataDir = mkdtempSync(join(tmpdir(), `${this.prefix}-`));
    this.#dirs.push(dataDir);
    const ex = new QemuExecutor({
      dataDir,
      imagesDir: IMAGES_DIR,
      network: this.net,
      netns: this.ns.name,
      goldenNet: GOLDEN_NET,
      accel: "auto",
      accelCacheFile: join(REPO, ".data", "qemu-accel.json"),
      log: pino({ level: "warn" }),
      ...extra,
    });
    return { ex, dataDir };
  }

  /** A slug and an address no box of this bench had before. */
  nextBox(name = "bench"): { slug: string; ip: string } {
    return { slug: `${name}-${++this.#seq}`, ip: numToIp((10 << 24) + this.#nextHost++) };
  }

  /** Resolves once the box's site at `ip` answers 200 (polled every 50 ms, 60 s at most). */
  siteAnswers(ip: string): Promise<void> {
    return this.answers(`http://${ip}:8000/`, 60_000);
  }

  /** Resolves once `url` in the bench's netns answers 200 (polled every 50 ms). */
  async answers(url: string, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const { stdout } = await exec("ip", [
        ...["netns", "exec", this.ns.name, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}"],
        ...["--max-time", "2", url],
      ]).catch(() => ({ stdout: "000" }));
      if (stdout.trim() === "200") return;
      if (Date.now() > deadline) throw new Error(`${url} never answered 200`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  /** The body of `url` fetched in the bench's netns, following redirects. */
  async get(url: string, timeoutMs = 120_000): Promise<string> {
    const { stdout } = await exec(
      "ip",
      ["netns", "exec", this.ns.name, "curl", "-sSfL", "--max-time", String(timeoutMs / 1000), url],
      { maxBuffer: 64 * 1024 * 1024 },
    );
    return stdout;
  }

  /** Removes every box of `executors`, the netns and the data dirs. */
  async cleanup(executors: QemuExecutor[]): Promise<void> {
    for (const ex of executors) {
      for (const { slug } of await ex.list().catch(() => []))
        await ex.remove(slug, quiet).catch(() => undefined);
      await ex.close();
    }
    this.ns.destroy();
    for (const dir of this.#dirs) rmSync(dir, { recursive: true, force: true });
  }
}
