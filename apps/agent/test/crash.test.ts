import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import Database from "better-sqlite3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort } from "../../api/test/support/ports.ts";
import {
  API_TOKEN,
  boxJobs,
  startCp,
  type TestCp,
  waitFor,
  waitForBox,
  waitForHeartbeat,
} from "./support/agent-harness.ts";
import { AgentProcess } from "./support/agent-process.ts";

describe("crash recovery: kill -9 in the middle of a job", () => {
  let cp: TestCp;
  let dataDir: string;
  let proc: AgentProcess;

  beforeAll(async () => {
    cp = await startCp();
    dataDir = await mkdtemp(path.join(tmpdir(), "doppio-crash-"));
    proc = await AgentProcess.prepare(
      dataDir,
      {
        controlPlaneUrl: cp.url,
        serverToken: cp.agentToken,
        dataDir,
        domain: "host-1.example.test",
        apiToken: API_TOKEN,
        listen: `127.0.0.1:${await freePort()}`,
        heartbeatIntervalMs: 500,
        claimWaitMs: 2_000,
        logLevel: "info",
      },
      { stepDelayMs: 1_500, stateFile: path.join(dataDir, "fake-host.json"), golden: { minimal: "ready" } },
    );
  });
  afterAll(async () => {
    await proc?.kill("SIGTERM");
    await cp?.close();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  it("finishes the job after a restart and the control plane sees its result exactly once", async () => {
    proc.start();
    await waitForHeartbeat(cp);
    const created = await cp.admin.post("/api/v1/boxes", { template: "minimal", name: "crashy" });
    expect(created.status).toBe(202);
    const jobId: string = created.body.job.id;

    // Mid-job: the control plane has seen the executor start working, and no result yet.
    const mid = await waitFor("the job to be mid-way", async () => {
      const [job] = await boxJobs(cp, "crashy");
      return job.status === "running" && job.steps.some((s: any) => s.name === "prepare_disks") ? job : null;
    });
    expect(mid.finishedAt).toBeNull();
    const pidBefore = proc.pid;
    expect(await proc.kill("SIGKILL")).toBeNull();

    const fakeHost = JSON.parse(await readFile(path.join(dataDir, "fake-host.json"), "utf8"));
    expect(fakeHost.vms.crashy).toBeUndefined();

    proc.start();
    expect(proc.pid).not.toBe(pidBefore);
    const box = await waitForBox(cp, "crashy", "running", 40_000);
    expect(box.ip).toBe("10.0.0.2");

    const [job] = await boxJobs(cp, "crashy");
    expect(job).toMatchObject({ id: jobId, status: "succeeded", result: { ip: "10.0.0.2" } });
    expect(job.steps.every((s: any) => s.status === "succeeded")).toBe(true);
    const finished = await cp.env.cp.ctx.metrics.jobsFinished.get();
    const creates = finished.values.filter((v) => v.labels.action === "create");
    expect(creates).toEqual([
      expect.objectContaining({ value: 1, labels: { action: "create", status: "succeeded" } }),
    ]);

    // The agent's own record: the job ran twice, and wrote exactly one result, delivered.
    await waitFor("outbox drained", () => {
      const db = new Database(path.join(dataDir, "agent.sqlite"), { readonly: true });
      try {
        const row = db.prepare("SELECT count(*) AS n FROM outbox WHERE delivered = 0").get() as { n: number };
        return row.n === 0;
      } finally {
        db.close();
      }
    });
    const db = new Database(path.join(dataDir, "agent.sqlite"), { readonly: true });
    const stored = db.prepare("SELECT status, attempt FROM jobs WHERE id = ?").get(jobId);
    const results = db
      .prepare(
        "SELECT count(*) AS n FROM outbox WHERE job_id = ? AND json_extract(event, '$.type') = 'result'",
      )
      .get(jobId) as { n: number };
    const started = db
      .prepare(
        "SELECT count(*) AS n FROM outbox WHERE job_id = ? AND json_extract(event, '$.type') = 'started'",
      )
      .get(jobId) as { n: number };
    const logs = db
      .prepare(
        "SELECT json_extract(event, '$.line') AS line FROM outbox WHERE job_id = ? AND json_extract(event, '$.type') = 'log'",
      )
      .all(jobId) as Array<{ line: string }>;
    db.close();
    expect(logs.map((l) => l.line)).toContain("running again after an agent restart (attempt 2)");
    expect(stored).toEqual({ status: "done", attempt: 2 });
    expect(results.n).toBe(1);
    expect(started.n).toBe(1);

    const fakeAfter = JSON.parse(await readFile(path.join(dataDir, "fake-host.json"), "utf8"));
    expect(fakeAfter.vms.crashy).toMatchObject({ state: "running", ip: "10.0.0.2" });

    // A clean stop (SIGTERM) exits 0 and leaves the VM running.
    expect(await proc.kill("SIGTERM")).toBe(0);
    const fakeStopped = JSON.parse(await readFile(path.join(dataDir, "fake-host.json"), "utf8"));
    expect(fakeStopped.vms.crashy.state).toBe("running");
  }, 120_000);
});
