import { randomBytes } from "node:crypto";
import { eq } from "drizzle-orm";
import { expect, it } from "vitest";
import { sha256 } from "../src/auth/secrets.ts";
import { servers } from "../src/db/schema.ts";
import { reapExpiredJobs } from "../src/services/jobs.ts";
import { heartbeat, registerServer, signedInClient, type TestClient } from "./support/client.ts";
import { describeOnEachDb } from "./support/each-db.ts";

const at = () => new Date().toISOString();
/** A box job's successful result as its contract has it (the box's address). */
const succeeded = (seq = 1) => ({ seq, at: at(), type: "result", ok: true, data: { ip: "10.0.0.9" } });

describeOnEachDb("agent protocol", (env) => {
  let admin: TestClient;
  let agentA: TestClient;
  let agentB: TestClient;

  async function setup() {
    admin ??= await env().admin();
    agentA ??= await registerServer(admin, "host-a");
    agentB ??= await registerServer(admin, "host-b", { capacity: { vcpu: 1, memoryMb: 1024, diskGb: 1 } });
    await agentA.post("/agent/v1/heartbeat", heartbeat());
    await agentB.post("/agent/v1/heartbeat", heartbeat());
  }

  it("refuses requests without a valid agent token", async () => {
    await setup();
    const anonymous = admin.withBearer("dpa_not-a-real-token");
    expect((await anonymous.post("/agent/v1/jobs/claim", { waitMs: 0 })).status).toBe(401);
    expect((await anonymous.post("/agent/v1/heartbeat", heartbeat())).status).toBe(401);
  });

  it("takes a host's next token (a play's) on its first use, two at once too, and the old one stops", async () => {
    await setup();
    // Too small for any box, as host B: the other tests place every box on host A.
    const before = await registerServer(admin, "host-rekeyed", {
      capacity: { vcpu: 1, memoryMb: 1024, diskGb: 1 },
    });
    const next = `dpa_${randomBytes(32).toString("base64url")}`;
    // What a provisioning play records before it hands the host its new token (ansible/plays.ts).
    await env()
      .cp.ctx.db.update(servers)
      .set({ nextAgentTokenHash: sha256(next) })
      .where(eq(servers.name, "host-rekeyed"));
    const after = admin.withBearer(next);
    // The agent's first heartbeat and first claim go out together.
    const [hb, claim] = await Promise.all([
      after.post("/agent/v1/heartbeat", heartbeat()),
      after.post("/agent/v1/jobs/claim", { waitMs: 0 }),
    ]);
    expect([hb.status, claim.status]).toEqual([200, 200]);
    expect((await after.post("/agent/v1/heartbeat", heartbeat())).status).toBe(200);
    expect((await before.post("/agent/v1/heartbeat", heartbeat())).status).toBe(401);
  });

  it("answers a held long-poll the moment a job is enqueued", async () => {
    await setup();
    const started = Date.now();
    const claim = agentA.post("/agent/v1/jobs/claim", { waitMs: 10_000 });
    await new Promise((r) => setTimeout(r, 200));
    const created = await admin.post("/api/v1/boxes", { template: "minimal", name: "fast" });
    expect(created.status).toBe(202);
    const res = await claim;
    expect(res.status).toBe(200);
    expect(res.body.jobs).toHaveLength(1);
    expect(res.body.jobs[0]).toMatchObject({ action: "create", box: "fast", attempt: 1 });
    // Well under the 10 s wait: it returned on the enqueue, not on the timeout.
    expect(Date.now() - started).toBeLessThan(5_000);
    const done = [succeeded()];
    await agentA.post(`/agent/v1/jobs/${res.body.jobs[0].id}/events`, { events: done });
  });

  it("returns an empty list when the wait runs out", async () => {
    await setup();
    const res = await agentB.post("/agent/v1/jobs/claim", { waitMs: 200 });
    expect(res.body).toEqual({ jobs: [] });
  });

  it("answers a server's held long-poll at once when a newer one of the same server arrives", async () => {
    await setup();
    const older = agentB.post("/agent/v1/jobs/claim", { waitMs: 20_000 });
    await new Promise((r) => setTimeout(r, 200));
    const newer = agentB.post("/agent/v1/jobs/claim", { waitMs: 1_000 });
    const started = Date.now();
    // The older poll (its agent gone, or one of a flood) is answered with nothing, long
    // before its 20 s are up; the newer one is held for its own wait.
    expect((await older).body).toEqual({ jobs: [] });
    expect(Date.now() - started).toBeLessThan(5_000);
    expect((await newer).body).toEqual({ jobs: [] });
    expect(Date.now() - started).toBeGreaterThanOrEqual(900);
  });

  it("applies events once, ignores stale sequences, and never changes a finished job", async () => {
    await setup();
    await admin.post("/api/v1/boxes", { template: "minimal", name: "evented" });
    const [job] = (await agentA.post("/agent/v1/jobs/claim", { waitMs: 0 })).body.jobs;
    const batch1 = [
      { seq: 1, at: at(), type: "started" },
      { seq: 2, at: at(), type: "step", name: "allocate_ip", status: "running" },
    ];
    expect((await agentA.post(`/agent/v1/jobs/${job.id}/events`, { events: batch1 })).body).toEqual({
      applied: 2,
      lastSeq: 2,
    });
    // A redelivery of the same batch (the agent did not see our answer) changes nothing.
    expect((await agentA.post(`/agent/v1/jobs/${job.id}/events`, { events: batch1 })).body).toEqual({
      applied: 0,
      lastSeq: 2,
    });
    // A gap is not applied; the agent learns lastSeq and resends from there.
    const gap = [succeeded(4)];
    expect((await agentA.post(`/agent/v1/jobs/${job.id}/events`, { events: gap })).body).toEqual({
      applied: 0,
      lastSeq: 2,
    });
    const rest = [
      { seq: 3, at: at(), type: "step", name: "allocate_ip", status: "succeeded" },
      { seq: 4, at: at(), type: "result", ok: true, data: { ip: "10.0.0.9" } },
    ];
    expect((await agentA.post(`/agent/v1/jobs/${job.id}/events`, { events: rest })).body).toEqual({
      applied: 2,
      lastSeq: 4,
    });
    const late = [{ seq: 5, at: at(), type: "result", ok: false, error: "late" }];
    expect((await agentA.post(`/agent/v1/jobs/${job.id}/events`, { events: late })).body).toEqual({
      applied: 0,
      lastSeq: 4,
    });

    const jobs = (await admin.get("/api/v1/boxes/evented/jobs")).body.jobs;
    expect(jobs[0]).toMatchObject({ status: "succeeded", error: null, result: { ip: "10.0.0.9" } });
    expect(jobs[0].steps).toMatchObject([{ name: "allocate_ip", status: "succeeded" }]);
    expect(jobs[0].steps[0].finishedAt).not.toBeNull();
    expect((await admin.get("/api/v1/boxes/evented")).body).toMatchObject({
      status: "running",
      ip: "10.0.0.9",
    });
  });

  it("keeps one server's jobs away from another server's token", async () => {
    await setup();
    await admin.post("/api/v1/boxes", { template: "minimal", name: "isolated" });
    expect((await agentB.post("/agent/v1/jobs/claim", { waitMs: 0 })).body.jobs).toEqual([]);
    const [job] = (await agentA.post("/agent/v1/jobs/claim", { waitMs: 0 })).body.jobs;
    const forged = await agentB.post(`/agent/v1/jobs/${job.id}/events`, {
      events: [{ seq: 1, at: at(), type: "result", ok: false, error: "forged" }],
    });
    expect(forged.status).toBe(404);
    expect((await admin.get("/api/v1/boxes/isolated")).body.status).toBe("creating");
    await agentA.post(`/agent/v1/jobs/${job.id}/events`, {
      events: [succeeded()],
    });
  });

  it("reaps expired leases: undelivered jobs go back to pending, silent running jobs fail visibly", async () => {
    await setup();
    const { cp } = env();
    await admin.post("/api/v1/boxes", { template: "minimal", name: "lost-delivery" });
    const [delivered] = (await agentA.post("/agent/v1/jobs/claim", { waitMs: 0 })).body.jobs;
    await admin.post("/api/v1/boxes", { template: "minimal", name: "went-silent" });
    const [running] = (await agentA.post("/agent/v1/jobs/claim", { waitMs: 0 })).body.jobs;
    await agentA.post(`/agent/v1/jobs/${running.id}/events`, {
      events: [{ seq: 1, at: at(), type: "started" }],
    });

    // Nothing has expired yet.
    expect(await reapExpiredJobs(cp.ctx)).toEqual({ requeued: 0, failed: 0 });
    const later = { now: () => new Date(Date.now() + cp.ctx.config.runningLeaseMs + 60_000) };
    expect(await reapExpiredJobs({ ...cp.ctx, clock: later })).toEqual({ requeued: 1, failed: 1 });

    const again = (await agentA.post("/agent/v1/jobs/claim", { waitMs: 0 })).body.jobs;
    expect(again).toMatchObject([{ id: delivered.id, attempt: 2 }]);
    const silent = (await admin.get("/api/v1/boxes/went-silent")).body;
    expect(silent.status).toBe("error");
    expect(silent.statusReason).toMatch(/stopped reporting/);
    expect(silent.errorCode).toBe("lease_expired");
    const failedJob = (await admin.get("/api/v1/boxes/went-silent/jobs")).body.jobs[0];
    expect(failedJob).toMatchObject({ status: "failed", errorCode: "lease_expired" });
    // The agent's late result cannot revive a failed job.
    const late = await agentA.post(`/agent/v1/jobs/${running.id}/events`, {
      events: [succeeded(2)],
    });
    expect(late.body.applied).toBe(0);
    await agentA.post(`/agent/v1/jobs/${delivered.id}/events`, {
      events: [succeeded()],
    });
  });

  it("fails a job whose result breaks its action's contract, and says why, without crashing", async () => {
    await setup();
    await admin.post("/api/v1/boxes", { template: "minimal", name: "malformed" });
    const [job] = (await agentA.post("/agent/v1/jobs/claim", { waitMs: 0 })).body.jobs;
    const bad = [{ seq: 1, at: at(), type: "result", ok: true, data: { ip: 42 } }];
    const res = await agentA.post(`/agent/v1/jobs/${job.id}/events`, { events: bad });
    // Taken (the agent must not resend it forever), and the job is closed as failed.
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ applied: 1, lastSeq: 1 });

    const [failed] = (await admin.get("/api/v1/boxes/malformed/jobs")).body.jobs;
    expect(failed).toMatchObject({ status: "failed", errorCode: "invalid_result", result: null });
    expect(failed.error).toMatch(/^the agent's create result does not match its contract \(data\.ip: /);
    const box = (await admin.get("/api/v1/boxes/malformed")).body;
    expect(box).toMatchObject({ status: "error", errorCode: "invalid_result", ip: null });
    expect(box.statusReason).toBe(failed.error);
    // Nothing the agent sends afterwards changes the closed job.
    const late = await agentA.post(`/agent/v1/jobs/${job.id}/events`, { events: [succeeded(2)] });
    expect(late.body).toEqual({ applied: 0, lastSeq: 1 });
  });

  it("extends the leases of jobs the agent reports holding", async () => {
    await setup();
    const { cp } = env();
    await admin.post("/api/v1/boxes", { template: "minimal", name: "held" });
    const [job] = (await agentA.post("/agent/v1/jobs/claim", { waitMs: 0 })).body.jobs;
    await agentA.post("/agent/v1/heartbeat", heartbeat({ minimal: "ready" }, { jobs: [job.id] }));
    const afterDelivery = { now: () => new Date(Date.now() + cp.ctx.config.deliveryLeaseMs + 1000) };
    expect(await reapExpiredJobs({ ...cp.ctx, clock: afterDelivery })).toEqual({ requeued: 0, failed: 0 });
    await agentA.post(`/agent/v1/jobs/${job.id}/events`, {
      events: [succeeded()],
    });
  });
  it("lets an admin queue a golden build for a server, once, and only an admin", async () => {
    await setup();
    const first = await admin.post("/api/v1/servers/host-b/golden", { template: "minimal" });
    expect(first.status).toBe(202);
    expect(first.body).toMatchObject({
      action: "build_golden",
      box: null,
      server: "host-b",
      status: "pending",
    });
    const again = await admin.post("/api/v1/servers/host-b/golden", { template: "minimal" });
    expect(again.body.id).toBe(first.body.id);
    expect((await admin.post("/api/v1/servers/host-b/golden", { template: "nope" })).status).toBe(400);
    expect((await admin.post("/api/v1/servers/no-such/golden", { template: "minimal" })).status).toBe(404);
    const user = await signedInClient(env().url, "not-admin");
    expect((await user.post("/api/v1/servers/host-b/golden", { template: "minimal" })).status).toBe(403);

    const [job] = (await agentB.post("/agent/v1/jobs/claim", { waitMs: 0 })).body.jobs;
    expect(job).toMatchObject({ id: first.body.id, action: "build_golden", box: null });
    expect(job.payload).toEqual({ template: "minimal", templateVersion: "1" });
    const golden = { template: "minimal", version: "1", imageVersion: "1", status: "ready", builtAt: at() };
    await agentB.post(`/agent/v1/jobs/${job.id}/events`, {
      events: [{ seq: 1, at: at(), type: "result", ok: true, data: golden }],
    });
  });
});
