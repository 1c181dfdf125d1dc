/**
 * Hibernate benchmark on real QEMU (`npm run bench:hibernate`, as root). Sets up its own
 * netns + bridge, builds the minimal image (cached in .data/images) and its golden snapshot,
 * and prints, from one run, side by side:
 *   - to-site-200 p50/p95: resume from hibernation vs restore from golden vs cold boot
 *   - host memory (QEMU's RSS) and disk (overlay + volume + saved memory) per box, running
 *     vs hibernated
 * Env: BENCH_RUNS (default 5) per series.
 */
import { readFile, stat } from "node:fs/promises";
import { hibernationPaths } from "../src/vmm/qemu/hibernate.ts";
import { boxPaths } from "../src/vmm/qemu/layout.ts";
import { readPid } from "../src/vmm/qemu/process.ts";
import { boxSpec, buildMinimalImage } from "../test/qemu/support.ts";
import { percentile, QemuBench, quiet, requireQemuBench } from "./qemu-bench.ts";

const RUNS = Number(process.env.BENCH_RUNS ?? 5);

requireQemuBench("bench:hibernate");
const bench = new QemuBench("dbxh");
const { ex, dataDir } = bench.executor();

const fmt = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
const mib = (bytes: number) => `${(bytes / 1024 ** 2).toFixed(1)} MiB`;
const line = (label: string, xs: number[]) =>
  `${label.padEnd(28)} p50 ${fmt(percentile(xs, 50))}  p95 ${fmt(percentile(xs, 95))}  [${xs.map((x) => (x / 1000).toFixed(2)).join(", ")}]`;

/** Bytes the box's files take on the host disk (allocated blocks, so sparse files count as used). */
async function diskBytes(slug: string): Promise<number> {
  const p = boxPaths(dataDir, slug);
  let total = 0;
  for (const f of [p.overlay, p.volume, hibernationPaths(p).vmstate]) {
    total += await stat(f).then(
      (s) => s.blocks * 512,
      () => 0,
    );
  }
  return total;
}

async function rssBytes(slug: string): Promise<number> {
  const pid = await readPid(boxPaths(dataDir, slug).pid);
  if (pid === null) return 0;
  const status = await readFile(`/proc/${pid}/status`, "utf8").catch(() => "");
  const kb = Number(/VmRSS:\s+(\d+) kB/.exec(status)?.[1] ?? 0);
  return kb * 1024;
}

const cleanup = () => bench.cleanup([ex]);
process.once("SIGINT", () => void cleanup().then(() => process.exit(130)));

try {
  await bench.net.ensureBridge();
  console.log(`bench:hibernate — QEMU microvm (minimal busybox image, 256 MiB), ${RUNS} runs per series`);
  buildMinimalImage("bench-512m", "512M");
  await ex.buildGolden(
    {
      name: "minimal",
      version: "bench",
      imageVersion: "bench-512m",
      readyPorts: [8000, 8888],
      memoryMb: 256,
      vcpu: 1,
    },
    quiet,
  );

  const restore: number[] = [];
  const cold: number[] = [];
  const resume: number[] = [];
  const hibernateMs: number[] = [];
  const running = { rss: [] as number[], disk: [] as number[] };
  const hibernated = { rss: [] as number[], disk: [] as number[], file: [] as number[] };
  // Interleaved so that load drift on the host hits every series alike.
  for (let i = 0; i < RUNS; i++) {
    const { slug, ip } = bench.nextBox();
    let t = performance.now();
    await ex.createFromGolden(boxSpec(slug, ip, 1), quiet);
    await bench.siteAnswers(ip);
    restore.push(performance.now() - t);
    running.rss.push(await rssBytes(slug));
    running.disk.push(await diskBytes(slug));

    t = performance.now();
    const saved = await ex.hibernate(slug, quiet);
    hibernateMs.push(performance.now() - t);
    hibernated.rss.push(await rssBytes(slug));
    hibernated.disk.push(await diskBytes(slug));
    hibernated.file.push(saved.memoryFileBytes);

    t = performance.now();
    await ex.start(boxSpec(slug, ip, 2), quiet);
    await bench.siteAnswers(ip);
    resume.push(performance.now() - t);

    // Cold boot of the same box: plain stop, then start boots its disks.
    await ex.stop(slug, quiet);
    t = performance.now();
    await ex.start(boxSpec(slug, ip, 3), quiet);
    await bench.siteAnswers(ip);
    cold.push(performance.now() - t);
    await ex.remove(slug, quiet);
  }

  console.log(line("resume from hibernation:", resume));
  console.log(line("restore from golden:", restore));
  console.log(line("cold boot (stopped box):", cold));
  console.log(
    `  p50 ratios: golden restore / resume ${(percentile(restore, 50) / percentile(resume, 50)).toFixed(2)}x, cold boot / resume ${(percentile(cold, 50) / percentile(resume, 50)).toFixed(2)}x`,
  );
  console.log(line("hibernate (save + exit):", hibernateMs));
  const avg = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  console.log(
    `per box, running:    host memory (QEMU RSS) ${mib(avg(running.rss))}, disk ${mib(avg(running.disk))}`,
  );
  console.log(
    `per box, hibernated: host memory ${mib(avg(hibernated.rss))}, disk ${mib(avg(hibernated.disk))} (of which saved memory ${mib(avg(hibernated.file))})`,
  );
} finally {
  await cleanup();
}
