import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { JobEvent } from "@doppio/contracts";
import { pino } from "pino";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { systemClock } from "../src/clock.ts";
import type { ControlPlane } from "../src/control-plane.ts";
import { Deliverer } from "../src/loops/deliverer.ts";
import { createMetrics } from "../src/metrics.ts";
import { openStore } from "../src/store/db.ts";
import { JobStore } from "../src/store/jobs.ts";
import { waitFor } from "./support/agent-harness.ts";

/** A control plane that takes every event and records each request. */
function recordingCp(): ControlPlane & { sent: Array<{ jobId: string; events: JobEvent[] }> } {
  const sent: Array<{ jobId: string; events: JobEvent[] }> = [];
  return {
    sent,
    claim: async () => ({ jobs: [], rejected: [] }),
    heartbeat: async () => {
      throw new Error("not used");
    },
    async sendEvents(jobId: string, events: JobEvent[]) {
      sent.push({ jobId, events });
      return { applied: events.length, lastSeq: events.at(-1)!.seq };
    },
  };
}

/**
 * The deliverer's loop batches a running job's progress (steps, log lines) and sends a
 * result at once, together with whatever still waits before it; every event reaches the
 * control plane once, in order.
 */
describe("Deliverer: progress batching", () => {
  let dir: string;
  let store: JobStore;
  let deliverer: Deliverer | null;
  const at = () => new Date().toISOString();
  const start = (progressFlushMs: number, cp: ControlPlane) => {
    deliverer = new Deliverer({
      store,
      cp,
      clock: systemClock,
      log: pino({ level: "silent" }),
      metrics: createMetrics({ defaults: false }),
      progressFlushMs,
    });
    deliverer.start();
    return deliverer;
  };
  const step = (job: string, name: "check_state" | "allocate_ip", status: "running" | "succeeded") => {
    store.append(job, { type: "step", at: at(), name, status });
    deliverer?.wake();
  };

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "dbxd-"));
    store = new JobStore(openStore(dir));
    deliverer = null;
  });
  afterEach(async () => {
    await deliverer?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it("holds a running job's progress and sends it with the result in one request", async () => {
    const cp = recordingCp();
    store.receive({ id: "job-1", action: "create", box: "b1", payload: null }, at());
    // A flush interval no test run reaches: only the result can make progress go out.
    start(600_000, cp);
    step("job-1", "check_state", "running");
    step("job-1", "check_state", "succeeded");
    step("job-1", "allocate_ip", "running");
    await new Promise((r) => setTimeout(r, 300));
    expect(cp.sent).toEqual([]);

    store.finish("job-1", { ok: true, data: { ip: "10.0.0.2" } }, at());
    deliverer!.wake();
    await waitFor("the result sent", () => cp.sent.length > 0, 5_000, 10);
    expect(cp.sent).toHaveLength(1);
    expect(cp.sent[0]!.events.map((e) => e.seq)).toEqual([1, 2, 3, 4, 5]);
    expect(cp.sent[0]!.events.map((e) => e.type)).toEqual(["started", "step", "step", "step", "result"]);
    expect(store.backlog()).toBe(0);
  });

  it("sends held progress once its oldest event has waited the flush interval, each event once", async () => {
    const cp = recordingCp();
    store.receive({ id: "job-2", action: "create", box: "b2", payload: null }, at());
    start(150, cp);
    step("job-2", "check_state", "running");
    step("job-2", "check_state", "succeeded");
    await waitFor("the progress sent", () => cp.sent.length > 0, 5_000, 10);
    // The acknowledgement and both steps, together.
    expect(cp.sent[0]!.events.map((e) => e.seq)).toEqual([1, 2, 3]);

    step("job-2", "allocate_ip", "running");
    await waitFor("the next progress sent", () => cp.sent.length > 1, 5_000, 10);
    store.finish("job-2", { ok: true, data: { ip: "10.0.0.3" } }, at());
    deliverer!.wake();
    await waitFor("the result sent", () => cp.sent.some((r) => r.events.some((e) => e.type === "result")));
    const seqs = cp.sent.flatMap((r) => r.events.map((e) => e.seq));
    expect(seqs).toEqual([1, 2, 3, 4, 5]);
  });

  it("deliverOnce (shutdown, tests) sends everything at once, held or not", async () => {
    const cp = recordingCp();
    store.receive({ id: "job-3", action: "create", box: "b3", payload: null }, at());
    store.append("job-3", { type: "log", at: at(), line: "one" });
    const d = new Deliverer({
      store,
      cp,
      clock: systemClock,
      log: pino({ level: "silent" }),
      metrics: createMetrics({ defaults: false }),
      progressFlushMs: 600_000,
    });
    expect(await d.deliverOnce()).toBe(2);
    expect(cp.sent.map((r) => r.events.length)).toEqual([2]);
  });
});
