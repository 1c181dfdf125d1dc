/**
 * Live-log latency: from a line appended to a box's serial log on the host to the same line
 * arriving at a follower of `GET /api/v1/boxes/:slug/logs/stream` (the dashboard's and
 * `doppio logs -f`'s path), through the real control plane (PGlite).
 *
 * Two shippers run side by side, each following its own box: the agent's default (inotify
 * wakes it on every write, 250 ms poll as fallback) and poll-only at the same 250 ms.
 * Lines alternate between the boxes at random gaps, so both see the same machine state and
 * samples fall anywhere in the poll cycle.
 *
 *   npx tsx apps/agent/bench/logs.ts [lines per box=200]
 */
import { appendFile, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { pino } from "pino";
import { HttpControlPlane } from "../src/control-plane.ts";
import { LogShipper } from "../src/logs/shipper.ts";
import { startAgent, startCp, waitForBox, waitForHeartbeat } from "../test/support/agent-harness.ts";

const N = Number(process.argv[2] ?? 200);
const POLL_MS = 250;
const MODES = [
  { name: "inotify + poll", slug: "bench-watch", watch: true },
  { name: "poll only", slug: "bench-poll", watch: false },
] as const;

const dir = await mkdtemp(path.join(tmpdir(), "doppio-bench-serial-"));
const cp = await startCp();
// The agent's own shipper has no serial logs to follow (the fake executor keeps none).
const a = await startAgent({ cpUrl: cp.url, token: cp.agentToken });
const http = new HttpControlPlane(cp.url, cp.agentToken);
const abort = new AbortController();
const shippers: LogShipper[] = [];
try {
  await waitForHeartbeat(cp);
  const sent = new Map<string, number>();
  const latencies = new Map<string, number[]>(MODES.map((m) => [m.slug, []]));
  const waiting = new Map<string, () => void>();
  for (const m of MODES) {
    await cp.admin.post("/api/v1/boxes", { template: "minimal", name: m.slug });
    await waitForBox(cp, m.slug, "running");
    await writeFile(path.join(dir, `${m.slug}.log`), "");
    const shipper = new LogShipper(
      {
        slugs: () => [m.slug],
        serialLog: (slug) => path.join(dir, `${slug}.log`),
        ship: (slug, batch) => http.shipLogs(slug, batch),
        now: () => new Date(),
        log: pino({ level: "silent" }),
      },
      { intervalMs: POLL_MS, watch: m.watch },
    );
    shipper.start();
    shippers.push(shipper);
    void follow(m.slug, (text) => {
      const t0 = sent.get(text);
      if (t0 === undefined) return;
      latencies.get(m.slug)!.push(performance.now() - t0);
      waiting.get(text)?.();
    });
  }
  await new Promise((r) => setTimeout(r, 300)); // followers connected

  for (let i = 0; i < N; i++) {
    for (const m of MODES) {
      const text = `line ${i} of ${m.slug} ${"x".repeat(60)}`;
      const got = new Promise<void>((resolve) => waiting.set(text, resolve));
      sent.set(text, performance.now());
      await appendFile(path.join(dir, `${m.slug}.log`), `[svc bench] ${text}\n`);
      await got;
      await new Promise((r) => setTimeout(r, Math.random() * POLL_MS));
    }
  }

  const stats = MODES.map((m) => {
    const l = latencies.get(m.slug)!.sort((x, y) => x - y);
    const q = (p: number) => l[Math.min(l.length - 1, Math.floor(p * l.length))]!;
    return { ...m, n: l.length, p50: q(0.5), p90: q(0.9), p99: q(0.99) };
  });
  console.log(`live log latency, serial log append -> SSE follower, ${N} lines per shipper`);
  for (const s of stats) {
    console.log(
      `  ${s.name.padEnd(15)} p50 ${s.p50.toFixed(1).padStart(6)} ms  p90 ${s.p90.toFixed(1).padStart(6)} ms  p99 ${s.p99.toFixed(1).padStart(6)} ms  (${s.n} lines)`,
    );
  }
  const [w, p] = stats as [(typeof stats)[0], (typeof stats)[0]];
  console.log(
    `  poll only / inotify: p50 ${(p.p50 / w.p50).toFixed(1)}x, p99 ${(p.p99 / w.p99).toFixed(1)}x`,
  );
} finally {
  abort.abort();
  for (const s of shippers) await s.stop();
  http.close();
  await a.close();
  await cp.close();
  await rm(dir, { recursive: true, force: true });
}

/** Reads the box's log stream, calling `onLine` with each line's text. */
async function follow(slug: string, onLine: (text: string) => void): Promise<void> {
  const res = await cp.admin.open(`/api/v1/boxes/${slug}/logs/stream?tail=0`, {}, abort.signal);
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += value;
      for (let end = buf.indexOf("\n\n"); end >= 0; end = buf.indexOf("\n\n")) {
        const data = /^data: (.*)$/m.exec(buf.slice(0, end));
        buf = buf.slice(end + 2);
        if (data) for (const l of JSON.parse(data[1]!).lines as Array<{ text: string }>) onLine(l.text);
      }
    }
  } catch {
    // aborted at the end
  }
}
