/**
 * Platform overhead of a create: the whole path (API request → placement → long-poll
 * claim → agent handler → QEMU restore → guest ready → events back → box `running` on the
 * event stream the dashboard and CLI follow), minus
 * the two parts that belong to the VMM and the guest (the restore_vm and wait_ready steps).
 * The control plane (PGlite) in a process of its own, as `make up` and production run it (in
 * this process, PGlite's queries held the agent's event loop and added ~30 ms to the p50);
 * the agent in this process, QEMU in a network namespace made here.
 *
 *   npm run bench:overhead [-- --boxes 6] [--steps]   (--steps prints every create's step times)
 */
import { parseArgs } from "node:util";
import type { Box } from "@doppio/contracts";
import { SseReader } from "../../api/test/support/sse.ts";
import { buildMinimalImage, qemuUnavailable } from "../test/qemu/support.ts";
import { API_TOKEN, boxJobs, startCpProcess, waitFor } from "../test/support/agent-harness.ts";
import { TestNetns } from "../test/support/netns.ts";
import { startQemuAgent } from "../test/support/qemu-agent.ts";

const { values } = parseArgs({
  options: { boxes: { type: "string", default: "6" }, steps: { type: "boolean", default: false } },
});
const BOXES = Number(values.boxes);
const missing = qemuUnavailable();
if (missing) {
  console.error(`bench:overhead needs ${missing}`);
  process.exit(2);
}

buildMinimalImage("bench-overhead");
const ns = TestNetns.create("dbxo");
const cp = await startCpProcess();
const { a, executor } = await startQemuAgent(cp, ns, "bench-overhead");
// The box turns `running` for the user when the control plane pushes it on the event stream
// the dashboard and the CLI follow; polling instead would add its interval, and its requests
// would load the control plane.
const boxEvents = new SseReader(await cp.admin.open("/api/v1/events"));
try {
  await fetch(`${a.apiUrl}/golden-snapshot/build`, {
    method: "POST",
    headers: { authorization: `Bearer ${API_TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify({ template: "minimal" }),
  });
  await waitFor(
    "golden",
    async () => (await executor.goldenStatus("minimal")).status === "ready",
    300_000,
    200,
  );
  // Production agents fill the volume pool at start (vmm/qemu/backend.ts); so does this one.
  await executor.volumePool?.idle();

  const totals: number[] = [];
  const vmm: number[] = [];
  const breakdown: Array<Record<string, number>> = [];
  const perStep = new Map<string, number[]>();
  for (let i = 0; i < BOXES; i++) {
    const slug = `over-${i}`;
    const started = performance.now();
    await cp.admin.post("/api/v1/boxes", { template: "minimal", name: slug });
    await boxEvents.waitFor(({ event, data }) => event === "box" && isRunning(data, slug));
    totals.push(performance.now() - started);
    const [job] = await boxJobs(cp, slug);
    const stepMs = (name: string) => {
      const s = job.steps.findLast((x: { name: string }) => x.name === name);
      return Date.parse(s.finishedAt) - Date.parse(s.startedAt);
    };
    vmm.push(stepMs("restore_vm") + stepMs("wait_ready"));
    const steps = job.steps as Array<{ name: string; startedAt: string; finishedAt: string }>;
    if (values.steps)
      console.log(
        steps.map((x) => `${x.name}=${Date.parse(x.finishedAt) - Date.parse(x.startedAt)}`).join(" "),
      );
    for (const x of steps) {
      const ms = Date.parse(x.finishedAt) - Date.parse(x.startedAt);
      perStep.set(x.name, [...(perStep.get(x.name) ?? []), ms]);
    }
    const firstStep = Math.min(...steps.map((x) => Date.parse(x.startedAt)));
    const lastStep = Math.max(...steps.map((x) => Date.parse(x.finishedAt)));
    // Steps may run side by side (disks and network): count the time covered by any step once.
    const inSteps = coveredMs(steps.map((x) => [Date.parse(x.startedAt), Date.parse(x.finishedAt)]));
    breakdown.push({
      queued: firstStep - Date.parse(job.createdAt),
      otherSteps: inSteps - vmm.at(-1)!,
      between: lastStep - firstStep - inSteps,
      reported: Date.parse(job.finishedAt) - lastStep,
    });
    await cp.admin.del(`/api/v1/boxes/${slug}`);
    await waitFor(
      "deleted",
      async () => (await cp.admin.get(`/api/v1/boxes/${slug}`)).status === 404,
      60_000,
      20,
    );
  }
  const p50 = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor((xs.length - 1) / 2)]!;
  const overhead = totals.map((t, i) => t - vmm[i]!);
  const fmt = (ms: number) => `${ms.toFixed(0)} ms`;
  console.log(`bench:overhead — ${BOXES} creates through control plane + agent + QEMU (TCG), one at a time`);
  console.log(`  create request -> box running   p50 ${fmt(p50(totals))}  [${totals.map(fmt).join(", ")}]`);
  console.log(`  VMM restore + guest ready        p50 ${fmt(p50(vmm))}`);
  console.log(
    `  platform overhead (the rest)     p50 ${fmt(p50(overhead))}  [${overhead.map(fmt).join(", ")}]`,
  );
  console.log(`  overhead share of create         ${((p50(overhead) / p50(totals)) * 100).toFixed(0)}%`);
  for (const key of ["queued", "otherSteps", "between", "reported"]) {
    console.log(`    ${key.padEnd(12)} p50 ${fmt(p50(breakdown.map((b) => b[key]!)))}`);
  }
  console.log("  per step (p50; disks and network run side by side):");
  for (const [name, xs] of perStep)
    console.log(`    ${name.padEnd(16)} p50 ${fmt(p50(xs))}  [${xs.join(", ")}]`);
} finally {
  for (const { slug } of (await executor.list()) ?? [])
    await executor.remove(slug, { step: (_n, f) => f(), log: () => {} }).catch(() => {});
  await boxEvents.close();
  await a.close();
  await cp.close();
  ns.destroy();
}

/** Length of the union of [start, end] intervals. */
function coveredMs(intervals: Array<[number, number]>): number {
  const sorted = [...intervals].sort((a, b) => a[0] - b[0]);
  let total = 0;
  let end = Number.NEGATIVE_INFINITY;
  for (const [s, e] of sorted) {
    if (e <= end) continue;
    total += e - Math.max(s, end);
    end = e;
  }
  return total;
}

function isRunning(box: unknown, slug: string): boolean {
  const b = box as Pick<Box, "slug" | "status">;
  return b.slug === slug && b.status === "running";
}
