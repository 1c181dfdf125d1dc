/**
 * TCG's translated code per box (`npm run bench:tcg`, as root). Under TCG, QEMU keeps a
 * guest's translations in a code buffer (`-accel tcg,tb-size=`), QEMU's default 1 GiB on top
 * of the guest's RAM; args.ts bounds it at TCG_CODE_BUFFER_MB. For the code template, with
 * buffers of 128, 256, 512 and 1024 MiB side by side in one run: restored clones and a
 * cold boot, each until code-server's /healthz answers, then code-server's workbench (its
 * page and the scripts and styles it names, as a browser's first load). Prints the times and
 * the code buffer's size at ready and after the workbench.
 * Env: BENCH_RUNS (default 3) clones per buffer size; BENCH_CODE=0 measures nothing.
 */

import { TCG_CODE_BUFFER_MB } from "../src/vmm/qemu/args.ts";
import type { QemuExecutor } from "../src/vmm/qemu/executor.ts";
import { boxPaths } from "../src/vmm/qemu/layout.ts";
import { readPid } from "../src/vmm/qemu/process.ts";
import { IMAGE_STORE_DIR } from "../test/images/support.ts";
import { boxSpec } from "../test/qemu/support.ts";
import { buildCodeImage, buildGolden, percentile, QemuBench, quiet, requireQemuBench } from "./qemu-bench.ts";
import { pssByKind } from "./vmm-memory.ts";

const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const SIZES = [...new Set([128, 256, 512, TCG_CODE_BUFFER_MB, 1024])].sort((a, b) => a - b);

requireQemuBench("bench:tcg");
const bench = new QemuBench("dbxt");
const executors: QemuExecutor[] = [];

interface Run {
  readyMs: number;
  workbenchMs: number;
  /** The code buffer's MiB when the box is ready and after the workbench. */
  atReady: number;
  afterWorkbench: number;
}

async function once(
  box: { ex: QemuExecutor; dataDir: string },
  mode: "clone" | "cold",
  t: { vcpu: number; memoryMb: number },
): Promise<Run> {
  const { slug, ip } = bench.nextBox();
  const spec = { ...boxSpec(slug, ip, 1, { template: "code" }), vcpu: t.vcpu, memoryMb: t.memoryMb };
  const site = `http://${ip}:8888/`;
  const codeMb = async () => {
    const pid = await readPid(boxPaths(box.dataDir, slug).pid);
    if (pid === null) throw new Error(`${slug}: no VMM pid`);
    return pssByKind(pid, t.memoryMb).get("TCG code buffer")! / 1024;
  };
  let at = performance.now();
  if (mode === "clone") await box.ex.createFromGolden(spec, quiet);
  else await box.ex.createColdBoot(spec, quiet);
  await bench.answers(`${site}healthz`, 300_000);
  const readyMs = performance.now() - at;
  const atReady = await codeMb();
  at = performance.now();
  const page = await bench.get(site);
  const assets = [...page.matchAll(/(?:src|href)="([^"]+\.(?:js|css))"/g)].map((m) => m[1]!);
  if (assets.length === 0) throw new Error(`code-server's workbench names no scripts: ${page.slice(0, 200)}`);
  for (const a of assets) await bench.get(new URL(a, site).href);
  const workbenchMs = performance.now() - at;
  const afterWorkbench = await codeMb();
  await box.ex.remove(slug, quiet);
  return { readyMs, workbenchMs, atReady, afterWorkbench };
}

try {
  await bench.net.ensureBridge();
  const image = await buildCodeImage();
  if (typeof image === "string") {
    console.log(`bench:tcg: not measured (${image})`);
  } else {
    console.log(
      `bench:tcg — code template (${image.template.memoryMb} MB, ${image.template.vcpu} vCPU), QEMU TCG; ${RUNS} clones and 1 cold boot per code buffer size; medians; one run`,
    );
    const rows: string[][] = [];
    for (const mb of SIZES) {
      const box = bench.executor({
        imagesDir: IMAGE_STORE_DIR,
        readyTimeoutMs: 300_000,
        tcgCodeBufferMb: mb,
      });
      executors.push(box.ex);
      await buildGolden(box.ex, image);
      const clones: Run[] = [];
      for (let i = 0; i < RUNS; i++) clones.push(await once(box, "clone", image.template));
      const cold = await once(box, "cold", image.template);
      const m = (f: (r: Run) => number) => percentile(clones.map(f), 50);
      rows.push([
        `${mb} MiB${mb === TCG_CODE_BUFFER_MB ? " (ours)" : mb === 1024 ? " (QEMU's)" : ""}`,
        `${(m((r) => r.readyMs) / 1000).toFixed(2)} s`,
        `${(m((r) => r.workbenchMs) / 1000).toFixed(2)} s`,
        `${m((r) => r.atReady).toFixed(0)} / ${m((r) => r.afterWorkbench).toFixed(0)} MiB`,
        `${(cold.readyMs / 1000).toFixed(2)} s`,
        `${(cold.workbenchMs / 1000).toFixed(2)} s`,
        `${cold.atReady.toFixed(0)} / ${cold.afterWorkbench.toFixed(0)} MiB`,
      ]);
    }
    const head = [
      "code buffer",
      "clone ready",
      "workbench",
      "code at ready / after",
      "cold ready",
      "workbench",
      "code at ready / after",
    ];
    const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
    for (const r of [head, ...rows]) console.log(r.map((c, i) => c.padEnd(widths[i]!)).join("  "));
  }
} finally {
  await bench.cleanup(executors);
}
