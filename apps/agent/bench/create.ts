/**
 * Create-time benchmark on real QEMU (`npx tsx apps/agent/bench/create.ts`, as root).
 * Sets up its own netns + bridge, builds the minimal image (cached in .data/images),
 * and prints measured numbers only:
 *   - create-to-site-200 p50: restore from golden vs cold boot (ratio)
 *   - 4 concurrent creates vs 4 serial (ratio)
 *   - restore create time with a 0.5 GB vs a 4 GB root image (ratio)
 * Env: BENCH_RUNS (default 5) restores per series, BENCH_COLD_RUNS (default 3) cold boots.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import pino from "pino";
import { LinuxHostNetwork } from "../src/net/host-network.ts";
import { numToIp } from "../src/net/ipv4.ts";
import type { StepReporter } from "../src/vmm/executor.ts";
import { QemuExecutor } from "../src/vmm/qemu/executor.ts";
import {
  boxSpec,
  buildMinimalImage,
  GOLDEN_NET,
  IMAGES_DIR,
  qemuUnavailable,
  REPO,
} from "../test/qemu/support.ts";
import { netnsUnavailable, TestNetns } from "../test/support/netns.ts";

const exec = promisify(execFile);
const RUNS = Number(process.env.BENCH_RUNS ?? 5);
const COLD_RUNS = Number(process.env.BENCH_COLD_RUNS ?? 3);
const quiet: StepReporter = { step: (_name, fn) => fn(), log: () => {} };

const missing = netnsUnavailable() ?? qemuUnavailable();
if (missing) {
  console.error(`bench:create needs root, QEMU and iproute2: ${missing}`);
  process.exit(2);
}

const ns = TestNetns.create("dbxb");
const dataDir = mkdtempSync(join(tmpdir(), "dbxb-"));
const net = new LinuxHostNetwork({ bridge: "br-devbox", cidr: "10.0.0.0/16", netns: ns.name });
const ex = new QemuExecutor({
  dataDir,
  imagesDir: IMAGES_DIR,
  network: net,
  netns: ns.name,
  goldenNet: GOLDEN_NET,
  accel: "auto",
  accelCacheFile: join(REPO, ".data", "qemu-accel.json"),
  log: pino({ level: "warn" }),
});
let nextHost = 10;
let seq = 0;

async function siteAnswers(ip: string): Promise<void> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const { stdout } = await exec("ip", [
      ...["netns", "exec", ns.name, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "2"],
      `http://${ip}:8000/`,
    ]).catch(() => ({ stdout: "000" }));
    if (stdout.trim() === "200") return;
    if (Date.now() > deadline) throw new Error(`${ip}:8000 never answered 200`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** One create (restore or cold boot) until the site answers 200; returns ms. */
async function createOnce(
  mode: "golden" | "cold",
  template = "minimal",
): Promise<{ ms: number; slug: string }> {
  const ip = numToIp((10 << 24) + nextHost++);
  const slug = `bench-${++seq}`;
  const spec = boxSpec(slug, ip, 1, { template });
  const t = performance.now();
  if (mode === "golden") await ex.createFromGolden(spec, quiet);
  else await ex.createColdBoot(spec, quiet);
  await siteAnswers(ip);
  return { ms: performance.now() - t, slug };
}

async function removeAll(): Promise<void> {
  for (const { slug } of await ex.list()) await ex.remove(slug, quiet);
}

async function series(mode: "golden" | "cold", n: number): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const r = await createOnce(mode);
    out.push(r.ms);
    await ex.remove(r.slug, quiet);
  }
  return out;
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

const cleanup = async () => {
  await removeAll().catch(() => undefined);
  ns.destroy();
  rmSync(dataDir, { recursive: true, force: true });
};
process.once("SIGINT", () => void cleanup().then(() => process.exit(130)));

try {
  await net.ensureBridge();
  console.log(
    `bench:create — QEMU microvm, minimal busybox image, ${RUNS} restores / ${COLD_RUNS} cold boots per series`,
  );
  const g512 = await golden("minimal", "bench-512m", "512M");
  console.log(`golden build (0.5 GB image): ${fmt(g512)}`);

  const restore = await series("golden", RUNS);
  const cold = await series("cold", COLD_RUNS);
  console.log(`create-to-site-200 restore from golden: p50 ${fmt(p50(restore))}  [${list(restore)}]`);
  console.log(`create-to-site-200 cold boot:           p50 ${fmt(p50(cold))}  [${list(cold)}]`);
  console.log(`  cold / restore p50 ratio: ${(p50(cold) / p50(restore)).toFixed(2)}x`);

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
      const r = await createOnce("golden", template);
      out.push(r.ms);
      await ex.remove(r.slug, quiet);
    }
  }
  console.log(`restore create-to-site-200 with 0.5 GB image: p50 ${fmt(p50(small))}  [${list(small)}]`);
  console.log(`restore create-to-site-200 with 4 GB image:   p50 ${fmt(p50(big))}  [${list(big)}]`);
  console.log(`  4 GB / 0.5 GB p50 ratio: ${(p50(big) / p50(small)).toFixed(2)}x`);
} finally {
  await cleanup();
}
