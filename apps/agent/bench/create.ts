/**
 * Create-time benchmark on real QEMU (`npx tsx apps/agent/bench/create.ts`, as root).
 * Sets up its own netns + bridge, builds the minimal image (cached in .data/images),
 * and prints measured numbers only:
 *   - create-to-site-200 p50: restore from golden vs cold boot (ratio)
 *   - 4 concurrent creates vs 4 serial (ratio)
 *   - restore create time with a 0.5 GB vs a 4 GB root image (ratio)
 * Env: BENCH_RUNS (default 5) restores per series, BENCH_COLD_RUNS (default 3) cold boots.
 */
import { boxSpec, buildMinimalImage } from "../test/qemu/support.ts";
import { QemuBench, quiet, requireQemuBench } from "./qemu-bench.ts";

const RUNS = Number(process.env.BENCH_RUNS ?? 5);
const COLD_RUNS = Number(process.env.BENCH_COLD_RUNS ?? 3);

requireQemuBench("bench:create");
const bench = new QemuBench("dbxb");
const { ex } = bench.executor();

/** One create (restore or cold boot) until the site answers 200; returns ms. */
async function createOnce(
  mode: "golden" | "cold",
  template = "minimal",
): Promise<{ ms: number; slug: string }> {
  const { slug, ip } = bench.nextBox();
  const spec = boxSpec(slug, ip, 1, { template });
  const t = performance.now();
  if (mode === "golden") await ex.createFromGolden(spec, quiet);
  else await ex.createColdBoot(spec, quiet);
  await bench.siteAnswers(ip);
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

const cleanup = () => bench.cleanup([ex]);
process.once("SIGINT", () => void cleanup().then(() => process.exit(130)));

try {
  await bench.net.ensureBridge();
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
