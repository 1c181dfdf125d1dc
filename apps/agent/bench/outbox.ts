/**
 * What a job's events cost the agent's one thread in its SQLite outbox, old way beside new
 * way, interleaved in one run (`npm run bench:outbox`): a durable commit (an fsync) for every
 * event, against events committed without one and synced once before delivery
 * (store/jobs.ts `append` + `sync`). Env: BENCH_RUNS (default 20), BENCH_EVENTS per job
 * (default 32: a create's steps, each started and finished).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openStore } from "../src/store/db.ts";
import { JobStore } from "../src/store/jobs.ts";

const RUNS = Number(process.env.BENCH_RUNS ?? 20);
const EVENTS = Number(process.env.BENCH_EVENTS ?? 32);
const dir = mkdtempSync(join(tmpdir(), "dbxo-"));
const db = openStore(dir);
const store = new JobStore(db);
const at = new Date().toISOString();
const event = (i: number) => ({
  type: "step" as const,
  at,
  name: "restore_vm" as const,
  status: i % 2 ? ("succeeded" as const) : ("running" as const),
});
// The old way, statement for statement what `append` runs, each in its own durable commit.
const bump = db.prepare("UPDATE jobs SET last_seq = last_seq + 1 WHERE id = ? RETURNING last_seq");
const put = db.prepare("INSERT INTO outbox (job_id, seq, event) VALUES (?, ?, ?)");
const durableAppend = db.transaction((jobId: string, i: number) => {
  const { last_seq } = bump.get(jobId) as { last_seq: number };
  put.run(jobId, last_seq, JSON.stringify({ seq: last_seq, ...event(i) }));
});
try {
  const old: number[] = [];
  const fresh: number[] = [];
  for (let r = 0; r < RUNS; r++) {
    for (const out of [old, fresh]) {
      const id = `job-${r}-${out === old ? "old" : "new"}`;
      store.insert({ id, action: "create", box: "b", payload: null, receivedAt: at });
      const t = performance.now();
      if (out === old) {
        for (let i = 0; i < EVENTS; i++) durableAppend(id, i);
      } else {
        for (let i = 0; i < EVENTS; i++) store.append(id, event(i));
        store.sync();
      }
      out.push(performance.now() - t);
    }
  }
  const p50 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]!;
  console.log(`bench:outbox — ${EVENTS} events of one job, ${RUNS} runs each, interleaved`);
  console.log(`  fsync per event:                 p50 ${p50(old).toFixed(1)} ms`);
  console.log(`  no fsync, one sync before send:  p50 ${p50(fresh).toFixed(1)} ms`);
  console.log(`  ratio: ${(p50(old) / p50(fresh)).toFixed(1)}x`);
} finally {
  db.close();
  rmSync(dir, { recursive: true, force: true });
}
