import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  boxJobs,
  startAgent,
  startCp,
  type TestAgent,
  type TestCp,
  waitFor,
  waitForBox,
  waitForHeartbeat,
} from "./support/agent-harness.ts";
import { PausableProxy } from "./support/pausable-proxy.ts";

const OUTAGE_MS = 30_000;

describe("control plane unreachable for 30 s while jobs finish", () => {
  let cp: TestCp;
  let proxy: PausableProxy;
  let a: TestAgent;

  beforeAll(async () => {
    cp = await startCp();
    const target = new URL(cp.url);
    proxy = await PausableProxy.start({ host: target.hostname, port: Number(target.port) });
    a = await startAgent({ cpUrl: proxy.url, token: cp.agentToken, fake: { stepDelayMs: 400 } });
    await waitForHeartbeat(cp);
  });
  afterAll(async () => {
    proxy?.resume();
    await a?.close();
    await proxy?.close();
    await cp?.close();
  });

  it("delivers every event after the outage, in order, exactly once", async () => {
    const names = ["out-a", "out-b", "out-c"];
    const ids: string[] = [];
    for (const name of names) {
      const res = await cp.admin.post("/api/v1/boxes", { template: "minimal", name });
      expect(res.status).toBe(202);
      ids.push(res.body.job.id);
    }
    // The agent holds all three (written to SQLite) before the network goes away.
    await waitFor("jobs claimed", () => ids.every((id) => a.agent.jobs.get(id) !== null));
    proxy.pause();
    const outageStarted = Date.now();

    // The jobs finish while the control plane cannot hear about it.
    await waitFor(
      "jobs done locally",
      () => ids.every((id) => a.agent.jobs.get(id)?.status === "done"),
      20_000,
    );
    expect(ids.every((id) => a.agent.jobs.get(id)?.ok === true)).toBe(true);
    expect(a.agent.jobs.backlog()).toBeGreaterThan(0);
    for (const name of names) {
      const [job] = await boxJobs(cp, name);
      expect(job.status).not.toBe("succeeded");
    }

    await new Promise((r) => setTimeout(r, Math.max(0, OUTAGE_MS - (Date.now() - outageStarted))));
    expect(a.agent.jobs.backlog()).toBeGreaterThan(0);
    proxy.resume();

    for (const name of names) await waitForBox(cp, name, "running", 20_000);
    await waitFor("outbox drained", () => a.agent.jobs.backlog() === 0);
    for (const [i, name] of names.entries()) {
      const [job] = await boxJobs(cp, name);
      expect(job).toMatchObject({ id: ids[i], status: "succeeded", error: null });
      // Every step the agent recorded is on the control plane, finished, in order.
      const local = a.agent.jobs
        .events(ids[i]!)
        .filter((e) => e.type === "step" && e.status === "running")
        .map((e) => (e as { name: string }).name);
      expect(job.steps.map((s: any) => s.name)).toEqual(local);
      expect(job.steps.every((s: any) => s.status === "succeeded" && s.finishedAt)).toBe(true);
      expect(a.agent.jobs.events(ids[i]!).every((e) => e.delivered === 1)).toBe(true);
    }
    const finished = await cp.env.cp.ctx.metrics.jobsFinished.get();
    expect(finished.values.find((v) => v.labels.action === "create")?.value).toBe(3);
  }, 120_000);
});
