/**
 * Live-log latency: from a line appended to a box's serial log on the host to the same line
 * arriving at a follower of `GET /api/v1/boxes/:slug/logs/stream` (the dashboard's and
 * `doppio logs -f`'s path). Real control plane (PGlite) and real agent loop; the fake
 * executor stands in for QEMU, whose only part here is appending to the file.
 *
 * Lines are written one at a time at random gaps, so samples fall anywhere in the
 * shipper's poll cycle; the shipper's poll interval is printed beside the latencies.
 *
 *   npx tsx apps/agent/bench/logs.ts [lines=200]
 */
import { appendFile, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { startAgent, startCp, waitForBox, waitForHeartbeat } from "../test/support/agent-harness.ts";

const N = Number(process.argv[2] ?? 200);
const POLL_MS = 250; // LogShipper's default interval

const serialDir = await mkdtemp(path.join(tmpdir(), "doppio-bench-serial-"));
const cp = await startCp();
const a = await startAgent({ cpUrl: cp.url, token: cp.agentToken, fake: { serialDir } });
const abort = new AbortController();
try {
  await waitForHeartbeat(cp);
  await cp.admin.post("/api/v1/boxes", { template: "minimal", name: "bench-logs" });
  await waitForBox(cp, "bench-logs", "running");
  const file = path.join(serialDir, "bench-logs.log");
  await writeFile(file, "");

  const sent = new Map<string, number>();
  const latencies: number[] = [];
  let arrived = null as (() => void) | null;
  const res = await cp.admin.open("/api/v1/boxes/bench-logs/logs/stream?tail=0", {}, abort.signal);
  const reading = (async () => {
    const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += value;
      for (let end = buf.indexOf("\n\n"); end >= 0; end = buf.indexOf("\n\n")) {
        const data = /^data: (.*)$/m.exec(buf.slice(0, end));
        buf = buf.slice(end + 2);
        if (!data) continue;
        for (const l of JSON.parse(data[1]!).lines as Array<{ text: string }>) {
          const t0 = sent.get(l.text);
          if (t0 !== undefined) latencies.push(performance.now() - t0);
          arrived?.();
        }
      }
    }
  })().catch(() => undefined);

  for (let i = 0; i < N; i++) {
    const text = `[svc bench] line ${i} ${"x".repeat(60)}`;
    const got = new Promise<void>((resolve) => {
      arrived = resolve;
    });
    sent.set(text.replace(/^\[svc bench\] /, ""), performance.now());
    await appendFile(file, `${text}\n`);
    await got;
    await new Promise((r) => setTimeout(r, Math.random() * POLL_MS));
  }
  abort.abort();
  await reading;

  latencies.sort((x, y) => x - y);
  const q = (p: number) => latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))]!;
  console.log(`live log latency, serial log append -> SSE follower, ${latencies.length} lines`);
  console.log(
    `  p50 ${q(0.5).toFixed(1)} ms  p90 ${q(0.9).toFixed(1)} ms  p99 ${q(0.99).toFixed(1)} ms  max ${latencies.at(-1)!.toFixed(1)} ms`,
  );
  console.log(
    `  shipper poll interval ${POLL_MS} ms: p50 = ${(q(0.5) / POLL_MS).toFixed(2)}x, p99 = ${(q(0.99) / POLL_MS).toFixed(2)}x the interval`,
  );
} finally {
  abort.abort();
  await a.close();
  await cp.close();
  await rm(serialDir, { recursive: true, force: true });
}
