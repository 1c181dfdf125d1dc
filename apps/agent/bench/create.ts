/**
 * Create-time benchmark on real QEMU (`npm run bench:create`, as root).
 * Sets up its own netns + bridge, builds the minimal image (cached in .data/images) and the
 * code template (cached in .data/template-images), and prints measured numbers only:
 *   - create → ready-port 200, p50 and p95: restore from golden vs cold boot (ratio), for the
 *     minimal template (site :8000) and the code template (code-server :8888/healthz)
 *   - 4 concurrent creates vs 4 serial (ratio)
 *   - restore create time with a 0.5 GB vs a 4 GB root image (ratio)
 * A pool claim is measured end to end through the control plane by `npm run bench:pool`.
 * Env: BENCH_RUNS (default 5) restores per series, BENCH_COLD_RUNS (default 3) cold boots,
 * BENCH_CODE=0 leaves the code template out (it needs mmdebstrap and code-server from npm).
 */
import type { StepReporter } from "../src/vmm/executor.ts";
import type { QemuExecutor } from "../src/vmm/qemu/executor.ts";
import { IMAGE_STORE_DIR } from "../test/images/support.ts";
import { boxSpec, buildMinimalImage, RecordingReporter } from "../test/qemu/support.ts";
import {
  buildCodeImage,
  buildGolden,
  percentile,
  QemuBench,
  quiet,
  requireQemuBench,
  restorePhases,
} from "./qemu-bench.ts";

const RUNS = Number(process.env.BENCH_RUNS ?? 5);
const COLD_RUNS = Number(process.env.BENCH_COLD_RUNS ?? 3);

requireQemuBench("bench:create");
const bench = new QemuBench("dbxb");
const { ex } = bench.executor();

type Mode = "golden" | "cold";
/** A template under test: its executor, and the URL (from the box's address) that says it is up. */
interface Subject {
  ex: QemuExecutor;
  template: string;
  ready: (ip: string) => string;
  readyTimeoutMs: number;
  vcpu?: number;
  memoryMb?: number;
}
const minimal: Subject = {
  ex,
  template: "minimal",
  ready: (ip) => `http://${ip}:8000/`,
  readyTimeoutMs: 60_000,
};

/** One create (restore or cold boot) until its ready URL answers 200; returns ms. */
async function createOnce(
  mode: Mode,
  s: Subject = minimal,
  report: StepReporter = quiet,
): Promise<{ ms: number; slug: string }> {
  const { slug, ip } = bench.nextBox();
  const spec = boxSpec(slug, ip, 1, { template: s.template });
  if (s.vcpu) spec.vcpu = s.vcpu;
  if (s.memoryMb) spec.memoryMb = s.memoryMb;
  const t = performance.now();
  if (mode === "golden") await s.ex.createFromGolden(spec, report);
  else await s.ex.createColdBoot(spec, report);
  await bench.answers(s.ready(ip), s.readyTimeoutMs);
  return { ms: performance.now() - t, slug };
}

async function removeAll(): Promise<void> {
  for (const { slug } of await ex.list()) await ex.remove(slug, quiet);
}

/** `n` creates one after another: each one's time, and each restore's phases to READY (restorePhases). */
async function series(mode: Mode, n: number, s: Subject = minimal) {
  const out: number[] = [];
  const phases = new Map<string, number[]>();
  for (let i = 0; i < n; i++) {
    const report = new RecordingReporter();
    const r = await createOnce(mode, s, report);
    out.push(r.ms);
    for (const [name, ms] of restorePhases(report).phases)
      phases.set(name, [...(phases.get(name) ?? []), ms]);
    await s.ex.remove(r.slug, quiet);
  }
  return Object.assign(out, { phases });
}

const p50 = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const fmt = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
const list = (xs: number[]) => xs.map((x) => (x / 1000).toFixed(2)).join(", ");

/** The minimal recipe built at `size` as template `name`, and its golden snapshot. */
async function golden(name: string, version: string, size: string): Promise<number> {
  buildMinimalImage(version, size, name);
  const t = performance.now();
  await ex.buildGolden(
    { name, version, imageVersion: version, readyPorts: [8000, 8888], memoryMb: 256, vcpu: 1 },
    quiet,
  );
  return performance.now() - t;
}

/** Restore from golden and cold boot of one template, side by side. */
async function restoreVsCold(s: Subject): Promise<void> {
  const restore = await series("golden", RUNS, s);
  const cold = await series("cold", COLD_RUNS, s);
  const line = (what: string, xs: number[]) =>
    console.log(`${s.template} ${what}: p50 ${fmt(p50(xs))}, p95 ${fmt(percentile(xs, 95))}  [${list(xs)}]`);
  line("create → ready, restore from golden", restore);
  line("create → ready, cold boot          ", cold);
  console.log(`  ${s.template} cold / restore p50 ratio: ${(p50(cold) / p50(restore)).toFixed(2)}x`);
  // Each phase ends at its mark: the agent's (launch.ts, ready.ts) and the guest's apply's.
  const phases = [...restore.phases].map(([name, xs]) => `${name} ${p50(xs).toFixed(0)}`);
  console.log(`  ${s.template} restore → READY phases, p50 ms, each ending at: ${phases.join(", ")}`);
}

/** The code template: its image (built once, cached by its inputs), its golden, restore vs cold. */
async function codeTemplate(): Promise<void> {
  const image = await buildCodeImage();
  if (typeof image === "string") {
    console.log(`code template: not measured (${image})`);
    return;
  }
  console.log(`code image: ${image.cached ? "cached" : `built in ${fmt(image.buildMs)}`}`);
  const code = bench.executor({ imagesDir: IMAGE_STORE_DIR, readyTimeoutMs: 300_000 }).ex;
  executors.push(code);
  const at = performance.now();
  await buildGolden(code, image);
  console.log(`golden build (code): ${fmt(performance.now() - at)}`);
  await restoreVsCold({
    ex: code,
    template: "code",
    ready: (ip) => `http://${ip}:8888/healthz`,
    readyTimeoutMs: 300_000,
    vcpu: image.template.vcpu,
    memoryMb: image.template.memoryMb,
  });
}

const executors = [ex];
const cleanup = () => bench.cleanup(executors);
process.once("SIGINT", () => void cleanup().then(() => process.exit(130)));

try {
  await bench.net.ensureBridge();
  console.log(
    `bench:create — QEMU microvm, minimal busybox image, ${RUNS} restores / ${COLD_RUNS} cold boots per series`,
  );
  const g512 = await golden("minimal", "bench-512m", "512M");
  console.log(`golden build (0.5 GB image): ${fmt(g512)}`);

  await restoreVsCold(minimal);

  let t = performance.now();
  await Promise.all([0, 1, 2, 3].map(() => createOnce("golden")));
  const concurrent = performance.now() - t;
  await removeAll();
  t = performance.now();
  for (let i = 0; i < 4; i++) await createOnce("golden");
  const serial = performance.now() - t;
  await removeAll();
  console.log(`4 creates concurrently: ${fmt(concurrent)}; 4 creates one after another: ${fmt(serial)}`);
  console.log(`  serial / concurrent ratio: ${(serial / concurrent).toFixed(2)}x`);

  const g4 = await golden("minimal-4g", "bench", "4G");
  console.log(`golden build (4 GB image): ${fmt(g4)}`);
  // Interleaved so that load drift on the host hits both series alike.
  const small: number[] = [];
  const big: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    for (const [template, out] of [
      ["minimal", small],
      ["minimal-4g", big],
    ] as const) {
      const r = await createOnce("golden", { ...minimal, template });
      out.push(r.ms);
      await ex.remove(r.slug, quiet);
    }
  }
  console.log(`restore create-to-site-200 with 0.5 GB image: p50 ${fmt(p50(small))}  [${list(small)}]`);
  console.log(`restore create-to-site-200 with 4 GB image:   p50 ${fmt(p50(big))}  [${list(big)}]`);
  console.log(`  4 GB / 0.5 GB p50 ratio: ${(p50(big) / p50(small)).toFixed(2)}x`);

  await codeTemplate();
} finally {
  await cleanup();
}
