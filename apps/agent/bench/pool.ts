/**
 * Warm pool vs golden restore, through the whole stack (`npm run bench:pool`, as root): a
 * control plane (PGlite) in a process of its own, as `make up` runs it, the real agent core
 * on QEMU in a test-owned netns in this process, a pool of one clone. Each round times
 * create request → box `running` on the control plane's event stream twice, interleaved so
 * load drift hits both alike: a create that claims the ready clone (size medium, the pool's
 * disk size) and, after the pool refilled, one that restores from the golden (size small:
 * no clone of that disk size). Prints p50/p95 side by side.
 * Then, with the pool at 4 clones, 4 claims one after another beside 4 at once (each batch
 * from a full pool; the pool refills in the background during both, as in service): the
 * batch's create requests → all 4 `running`, and the concurrent / serial ratio.
 * Env: BENCH_RUNS (default 5) rounds, BENCH_BATCHES (default 2) batches of each.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BOX_SIZES, type Box } from "@doppio/contracts";
import { SseReader } from "../../api/test/support/sse.ts";
import { startPoolAgent } from "../test/pool/support.ts";
import { buildMinimalImage } from "../test/qemu/support.ts";
import { boxJobs, startCpProcess, waitFor } from "../test/support/agent-harness.ts";
import { TestNetns } from "../test/support/netns.ts";
import { percentile, quiet, requireQemuBench } from "./qemu-bench.ts";

const RUNS = Number(process.env.BENCH_RUNS ?? 5);
const BATCHES = Number(process.env.BENCH_BATCHES ?? 2);
const BATCH = 4;
requireQemuBench("bench:pool");
buildMinimalImage("bench-pool");
const ns = TestNetns.create("dbxq");
const dataDir = mkdtempSync(join(tmpdir(), "dbxq-"));
// Every create of the run comes from one admin, faster than the production per-user limit
// (30 a minute) allows: the limit is the control plane's business, not what this bench times.
const CREATES = RUNS * 2 + BATCHES * 2 * BATCH;
const cp = await startCpProcess("host-1", { boxCreatesPerMinute: Math.max(30, CREATES) });
const pa = await startPoolAgent(cp, ns, dataDir, "bench-pool", 1, BOX_SIZES.medium.diskGb);
// `running` as the dashboard and CLI see it: pushed on the event stream (a 100 ms poll
// added up to its interval to every time here, more than the claim's platform part).
const boxEvents = new SseReader(await cp.admin.open("/api/v1/events"));

const poolFull = (n = 1) =>
  waitFor(`${n} ready pool clones`, () => pa.agent.pool.state()[0]?.ready === n, 900_000, 200).then(() =>
    pa.agent.pool.idle(),
  );

async function remove(names: string[]): Promise<void> {
  for (const name of names) await cp.admin.del(`/api/v1/boxes/${name}`);
  for (const name of names) {
    await waitFor(
      "deleted",
      async () => (await cp.admin.get(`/api/v1/boxes/${name}`)).status === 404,
      120_000,
    );
  }
}

/** 4 claims from a full pool of 4, one after another or all at once: ms until the last is running. */
async function batch(label: string, concurrent: boolean): Promise<number> {
  await poolFull(BATCH);
  const names = Array.from({ length: BATCH }, (_, i) => `${label}-${i}`);
  const t = performance.now();
  const runs: Array<{ ms: number; steps: string[] }> = [];
  if (concurrent) runs.push(...(await Promise.all(names.map((n) => create(n, "medium")))));
  else for (const n of names) runs.push(await create(n, "medium"));
  const ms = performance.now() - t;
  const missed = runs.filter((r) => !r.steps.includes("claim_clone")).length;
  if (missed) throw new Error(`${label}: ${missed} of ${BATCH} creates did not claim a clone`);
  await remove(names);
  return ms;
}

async function create(name: string, size: "small" | "medium"): Promise<{ ms: number; steps: string[] }> {
  const t = performance.now();
  const res = await cp.admin.post("/api/v1/boxes", { template: "minimal", name, size });
  if (res.status !== 202) throw new Error(`create ${name}: ${res.status} ${JSON.stringify(res.body)}`);
  await boxEvents.waitFor(({ event, data }) => event === "box" && isRunning(data, name));
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
    await remove([`pool-claim-${i}`, `golden-${i}`]);
  }
  const row = (label: string, xs: number[]) =>
    `${label}  p50 ${fmt(percentile(xs, 50))}  p95 ${fmt(percentile(xs, 95))}  [${xs.map((x) => (x / 1000).toFixed(2)).join(", ")}]`;
  console.log(row("golden restore:", golden));
  console.log(row("pool claim:    ", pool));
  console.log(`  golden / pool p50 ratio: ${(percentile(golden, 50) / percentile(pool, 50)).toFixed(2)}x`);

  // The pool at 4: through the control plane, as an admin sets it.
  const set = await cp.admin.request("PATCH", `/api/v1/servers/${cp.serverName}/warm-pool`, {
    sizes: { minimal: BATCH },
  });
  if (set.status !== 200) throw new Error(`warm-pool size: ${set.status}`);
  await pa.agent.heartbeat.beatOnce();
  const serial: number[] = [];
  const concurrent: number[] = [];
  for (let i = 0; i < BATCHES; i++) {
    // Alternating which goes first, so drift in the machine's load hits both alike.
    if (i % 2 === 0) {
      serial.push(await batch(`serial-${i}`, false));
      concurrent.push(await batch(`concurrent-${i}`, true));
    } else {
      concurrent.push(await batch(`concurrent-${i}`, true));
      serial.push(await batch(`serial-${i}`, false));
    }
  }
  const batchRow = (label: string, xs: number[]) =>
    `${label}  p50 ${fmt(percentile(xs, 50))}  [${xs.map((x) => (x / 1000).toFixed(2)).join(", ")}]`;
  console.log(`${BATCH} pool claims, ${BATCHES} batches each, requests → all ${BATCH} running:`);
  console.log(batchRow(`${BATCH} serial:    `, serial));
  console.log(batchRow(`${BATCH} concurrent:`, concurrent));
  console.log(
    `  concurrent / serial p50 ratio: ${(percentile(concurrent, 50) / percentile(serial, 50)).toFixed(2)}`,
  );
} finally {
  // The agent first: its stop waits for a pool fill in flight, whose VM is then listed too
  // (removing VMs first left a clone being made running after the bench).
  await boxEvents.close();
  await pa.stop();
  for (const { slug } of await pa.executor.list())
    await pa.executor.remove(slug, quiet).catch(() => undefined);
  await cp.close();
  ns.destroy();
  rmSync(dataDir, { recursive: true, force: true });
}

function isRunning(box: unknown, slug: string): boolean {
  const b = box as Pick<Box, "slug" | "status">;
  return b.slug === slug && b.status === "running";
}
