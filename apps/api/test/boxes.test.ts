import { expect, it, vi } from "vitest";
import { heartbeat, registerServer, signedInClient, type TestClient } from "./support/client.ts";
import { describeOnEachDb } from "./support/each-db.ts";

/**
 * Completes the box's pending job through the real agent protocol, as an agent would: a
 * success carries its action's result (the box's address, except for a delete), a failure
 * its error code.
 */
async function finishJob(agent: TestClient, ok = true, data?: Record<string, unknown>) {
  const claim = await agent.post("/agent/v1/jobs/claim", { waitMs: 0 });
  expect(claim.status).toBe(200);
  const job = claim.body.jobs[0];
  const at = new Date().toISOString();
  const result = data ?? (job.action === "delete" ? {} : { ip: "10.0.0.3" });
  const events = [
    { seq: 1, at, type: "started" },
    ok
      ? { seq: 2, at, type: "result", ok: true, data: result }
      : { seq: 2, at, type: "result", ok: false, code: "disk_failed", error: "disk full" },
  ];
  const res = await agent.post(`/agent/v1/jobs/${job.id}/events`, { events });
  expect(res.status).toBe(200);
  return job;
}

describeOnEachDb("boxes", (env) => {
  let admin: TestClient;
  let agent: TestClient;

  it("creates nothing and answers 503 when no server can take the box", async () => {
    admin = await env().admin();
    const res = await admin.post("/api/v1/boxes", { template: "minimal", name: "nowhere" });
    expect(res.status).toBe(503);
    expect(res.body.error.code).toBe("no_capacity");
    expect(res.body.error.details.reasons).toEqual(["no servers registered"]);
    expect((await admin.get("/api/v1/boxes")).body.boxes).toEqual([]);

    agent = await registerServer(admin, "fc-01");
    const stale = await admin.post("/api/v1/boxes", { template: "minimal", name: "nowhere" });
    expect(stale.status).toBe(503);
    expect(stale.body.error.details.reasons).toEqual(["fc-01: agent not heard from recently"]);
  });

  it("places a box on a server with a ready golden snapshot and walks it through its lifecycle", async () => {
    expect(
      (await agent.post("/agent/v1/heartbeat", heartbeat({ minimal: "ready", code: "missing" }))).status,
    ).toBe(200);
    const templates = await admin.get("/api/v1/templates");
    expect(templates.body.templates.find((t: any) => t.name === "minimal").readyOn).toEqual(["fc-01"]);

    const code = await admin.post("/api/v1/boxes", { template: "code" });
    expect(code.status).toBe(503);
    expect(code.body.error.details.reasons).toEqual(["fc-01: template not ready"]);

    const created = await admin.post("/api/v1/boxes", {
      template: "minimal",
      name: "demo",
      env: { GREETING: "hi" },
    });
    expect(created.status).toBe(202);
    expect(created.body.box).toMatchObject({
      slug: "demo",
      status: "creating",
      desiredState: "running",
      server: "fc-01",
      size: "small",
      env: { GREETING: "hi" },
      urls: { site: "https://demo.site.fc-01.example.test", code: "https://demo.code.fc-01.example.test" },
      allowedActions: ["delete"],
    });
    expect(created.body.job).toMatchObject({ action: "create", status: "pending", box: "demo" });

    const busy = await admin.post("/api/v1/boxes/demo/stop");
    expect(busy.status).toBe(409);

    const job = await finishJob(agent, true, { ip: "10.0.0.2" });
    expect(job.payload).toMatchObject({
      slug: "demo",
      template: "minimal",
      memoryMb: 2048,
      env: { GREETING: "hi" },
    });
    const running = await admin.get("/api/v1/boxes/demo");
    expect(running.body).toMatchObject({
      status: "running",
      ip: "10.0.0.2",
      allowedActions: ["stop", "hibernate", "reset", "delete"],
    });

    const startWhileRunning = await admin.post("/api/v1/boxes/demo/start");
    expect(startWhileRunning.status).toBe(409);
    expect(startWhileRunning.body.error.details.allowedActions).toEqual([
      "stop",
      "hibernate",
      "reset",
      "delete",
    ]);

    const stop = await admin.post("/api/v1/boxes/demo/stop");
    expect(stop.status).toBe(202);
    const again = await admin.post("/api/v1/boxes/demo/stop");
    expect(again.status).toBe(200);
    expect(again.body.job.id).toBe(stop.body.job.id);
    await finishJob(agent);
    expect((await admin.get("/api/v1/boxes/demo")).body.status).toBe("stopped");

    const env = await admin.request("PATCH", "/api/v1/boxes/demo", { env: { GREETING: "hello" } });
    expect(env.status).toBe(200);
    const start = await admin.post("/api/v1/boxes/demo/start");
    expect(start.body.job.action).toBe("start");
    const startJob = await finishJob(agent);
    expect(startJob.payload.env).toEqual({ GREETING: "hello" });

    const jobs = await admin.get("/api/v1/boxes/demo/jobs");
    expect(jobs.body.jobs.map((j: any) => `${j.action}:${j.status}`)).toEqual([
      "start:succeeded",
      "stop:succeeded",
      "create:succeeded",
    ]);

    const del = await admin.del("/api/v1/boxes/demo");
    expect(del.status).toBe(202);
    await finishJob(agent);
    expect((await admin.get("/api/v1/boxes/demo")).status).toBe(404);
    expect((await admin.get("/api/v1/boxes")).body.boxes).toEqual([]);
  });

  it("shows a failed job's reason on the box and allows a retry", async () => {
    await agent.post("/agent/v1/heartbeat", heartbeat());
    await admin.post("/api/v1/boxes", { template: "minimal", name: "flaky" });
    await finishJob(agent, false);
    const box = await admin.get("/api/v1/boxes/flaky");
    expect(box.body).toMatchObject({ status: "error", statusReason: "disk full", errorCode: "disk_failed" });
    expect(box.body.allowedActions).toContain("start");
    expect((await admin.post("/api/v1/boxes/flaky/start")).status).toBe(202);
    await finishJob(agent);
    expect((await admin.get("/api/v1/boxes/flaky")).body).toMatchObject({
      status: "running",
      statusReason: null,
      errorCode: null,
    });
    const jobs = (await admin.get("/api/v1/boxes/flaky/jobs")).body.jobs;
    expect(jobs.map((j: any) => [j.action, j.status, j.errorCode, j.error])).toEqual([
      ["start", "succeeded", null, null],
      ["create", "failed", "disk_failed", "disk full"],
    ]);
  });

  it("refuses a slug that is taken and accepts it again once the box is deleted", async () => {
    await agent.post("/agent/v1/heartbeat", heartbeat());
    expect((await admin.post("/api/v1/boxes", { template: "minimal", name: "reuse" })).status).toBe(202);
    const dup = await admin.post("/api/v1/boxes", { template: "minimal", name: "reuse" });
    expect(dup.status).toBe(409);
    await finishJob(agent);
    await admin.del("/api/v1/boxes/reuse");
    await finishJob(agent);
    expect((await admin.post("/api/v1/boxes", { template: "minimal", name: "reuse" })).status).toBe(202);
    await finishJob(agent);
  });

  it("hides other teams' boxes behind the same 404 as a missing box", async () => {
    await agent.post("/agent/v1/heartbeat", heartbeat());
    await admin.post("/api/v1/boxes", { template: "minimal", name: "private-one" });
    const other = await signedInClient(env().url, "other");
    const theirs = await other.get("/api/v1/boxes/private-one");
    const missing = await other.get("/api/v1/boxes/does-not-exist");
    expect(theirs.status).toBe(404);
    expect(theirs.body.error.code).toBe(missing.body.error.code);
    expect((await other.post("/api/v1/boxes/private-one/stop")).status).toBe(404);
    expect((await other.del("/api/v1/boxes/private-one")).status).toBe(404);
    expect((await other.get("/api/v1/boxes/private-one/jobs")).status).toBe(404);
    expect((await other.request("PATCH", "/api/v1/boxes/private-one", { env: {} })).status).toBe(404);
    expect((await other.get("/api/v1/boxes")).body.boxes).toEqual([]);
    await finishJob(agent);
  });

  it("answers a create and an action with the box as committed, and wakes the agent before any read after the commit", async () => {
    await agent.post("/agent/v1/heartbeat", heartbeat());
    const owner = await signedInClient(env().url, "answered");
    // The owner's own idle timeout shows in the box's view: the answer must carry it too.
    expect((await owner.request("PATCH", "/api/v1/me/idle", { idleTimeoutMinutes: 45 })).status).toBe(200);
    const { ctx } = env().cp;
    const order: string[] = [];
    const transaction = ctx.db.transaction.bind(ctx.db);
    const select = ctx.db.select.bind(ctx.db);
    const wake = ctx.bus.jobEnqueued.bind(ctx.bus);
    const spies = [
      vi.spyOn(ctx.db, "transaction").mockImplementation((async (...args: Parameters<typeof transaction>) => {
        const result = await transaction(...args);
        order.push("commit");
        return result;
      }) as never),
      vi.spyOn(ctx.db, "select").mockImplementation(((...args: Parameters<typeof select>) => {
        order.push("read");
        return select(...args);
      }) as never),
      vi.spyOn(ctx.bus, "jobEnqueued").mockImplementation((serverId) => {
        order.push("wake");
        wake(serverId);
      }),
    ];
    try {
      const created = await owner.post("/api/v1/boxes", { template: "minimal", name: "answered" });
      expect(created.status).toBe(202);
      expect(order.slice(order.lastIndexOf("commit"))).toEqual(["commit", "wake"]);
      expect(created.body.box).toMatchObject({ idleTimeoutMinutes: 45, server: "fc-01" });
      expect(created.body.box).toEqual((await owner.get("/api/v1/boxes/answered")).body);
      await finishJob(agent);

      order.length = 0;
      const stop = await owner.post("/api/v1/boxes/answered/stop");
      expect(stop.status).toBe(202);
      expect(order.slice(order.lastIndexOf("commit"))).toEqual(["commit", "wake"]);
      expect(stop.body.box).toMatchObject({ status: "stopping", idleTimeoutMinutes: 45 });
      expect(stop.body.box).toEqual((await owner.get("/api/v1/boxes/answered")).body);
    } finally {
      for (const spy of spies) spy.mockRestore();
    }
    await finishJob(agent);
    await owner.del("/api/v1/boxes/answered");
    await finishJob(agent);
  });

  it("accounts used capacity per server and reports drift from the agent's inventory", async () => {
    const hb = await agent.post(
      "/agent/v1/heartbeat",
      heartbeat({ minimal: "ready" }, { vms: [{ slug: "ghost", state: "running", ip: null }] }),
    );
    const running = (await admin.get("/api/v1/boxes")).body.boxes.filter((b: any) => b.status === "running");
    expect(running.length).toBeGreaterThan(0);
    expect(hb.body.drift).toEqual(
      expect.arrayContaining([
        { slug: "ghost", expected: "absent", observed: "running" },
        ...running.map((b: any) => ({ slug: b.slug, expected: "running", observed: "gone" })),
      ]),
    );
    const server = await admin.get("/api/v1/servers/fc-01");
    const live = (await admin.get("/api/v1/boxes")).body.boxes.length;
    expect(server.body.used).toEqual({ vcpu: live, memoryMb: live * 2048, diskGb: live * 10 });
    expect(server.body.agentVersion).toBe("test");
    expect(server.body.golden.minimal).toEqual({ status: "ready", version: "1" });
  });
});
