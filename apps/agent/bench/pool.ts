/**
 * Warm pool vs golden restore, through the whole stack (`npm run bench:pool`, as root): a
 * control plane (in process, PGlite), the real agent core on QEMU in a test-owned netns,
 * a pool of one clone. Each round times create request → box `running` at the control plane
 * twice, interleaved so load drift hits both alike: a create that claims the ready clone
 * (size medium, the pool's disk size) and, after the pool refilled, one that restores from
 * the golden (size small: no clone of that disk size). Prints p50/p95 side by side.
 * Env: BENCH_RUNS (default 5) rounds.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BOX_SIZES } from "@doppio/contracts";
import { startPoolAgent } from "../test/pool/support.ts";
import { buildMinimalImage } from "../test/qemu/support.ts";
import { boxJobs, startCp, waitFor, waitForBox } from "../test/support/agent-harness.ts";
import { TestNetns } from "../test/support/netns.ts";
import { percentile, quiet, requireQemuBench } from "./qemu-bench.ts";

const RUNS = Number(process.env.BENCH_RUNS ?? 5);
requireQemuBench("bench:pool");
buildMinimalImage("bench-pool");
const ns = TestNetns.create("dbxq");
const dataDir = mkdtempSync(join(tmpdir(), "dbxq-"));
const cp = await startCp();
const pa = await startPoolAgent(cp, ns, dataDir, "bench-pool", 1, BOX_SIZES.medium.diskGb);

const poolFull = () =>
  waitFor("a ready pool clone", () => pa.agent.pool.state()[0]?.ready === 1, 600_000, 200).then(() =>
    pa.agent.pool.idle(),
  );

async function create(name: string, size: "small" | "medium"): Promise<{ ms: number; steps: string[] }> {
  const t = performance.now();
  const res = await cp.admin.post("/api/v1/boxes", { template: "minimal", name, size });
  if (res.status !== 202) throw new Error(`create ${name}: ${res.status} ${JSON.stringify(res.body)}`);
  await waitForBox(cp, name, "running", 600_000);
  const ms = performance.now() - t;
  const [job] = await boxJobs(cp, name);
  return { ms, steps: job.steps.map((s: { name: string }) => s.name) };
}

const fmt = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
const pool: number[] = [];
const golden: number[] = [];
try {
  console.log(`bench:pool — QEMU microvm (TCG), minimal image, ${RUNS} rounds, create request → running`);
  for (let i = 0; i < RUNS; i++) {
    await poolFull();
    const p = await create(`pool-claim-${i}`, "medium");
    if (!p.steps.includes("claim_clone")) throw new Error(`round ${i}: the pool create did not claim`);
    pool.push(p.ms);
    await poolFull();
    const g = await create(`golden-${i}`, "small");
    if (!g.steps.includes("restore_vm")) throw new Error(`round ${i}: the golden create did not restore`);
    golden.push(g.ms);
    for (const name of [`pool-claim-${i}`, `golden-${i}`]) {
      await cp.admin.del(`/api/v1/boxes/${name}`);
      await waitFor(
        "deleted",
        async () => (await cp.admin.get(`/api/v1/boxes/${name}`)).status === 404,
        120_000,
      );
    }
  }
  const row = (label: string, xs: number[]) =>
    `${label}  p50 ${fmt(percentile(xs, 50))}  p95 ${fmt(percentile(xs, 95))}  [${xs.map((x) => (x / 1000).toFixed(2)).join(", ")}]`;
  console.log(row("golden restore:", golden));
  console.log(row("pool claim:    ", pool));
  console.log(`  golden / pool p50 ratio: ${(percentile(golden, 50) / percentile(pool, 50)).toFixed(2)}x`);
} finally {
  for (const { slug } of await pa.executor.list())
    await pa.executor.remove(slug, quiet).catch(() => undefined);
  await pa.stop();
  await cp.close();
  ns.destroy();
  rmSync(dataDir, { recursive: true, force: true });
}
