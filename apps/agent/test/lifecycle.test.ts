import { STEP_NAMES } from "@doppio/contracts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  AGENT_PACKAGE_VERSION,
  boxJobs,
  startAgent,
  startCp,
  type TestAgent,
  type TestCp,
  waitFor,
  waitForBox,
  waitForHeartbeat,
} from "./support/agent-harness.ts";

describe("agent lifecycle through the real control plane", () => {
  let cp: TestCp;
  let a: TestAgent;

  beforeAll(async () => {
    cp = await startCp();
    a = await startAgent({ cpUrl: cp.url, token: cp.agentToken });
    await waitForHeartbeat(cp);
  });
  afterAll(async () => {
    await a?.close();
    await cp?.close();
  });

  it("creates a box from golden: running, routed, steps with timings visible", async () => {
    const res = await cp.admin.post("/api/v1/boxes", {
      template: "minimal",
      name: "alpha",
      env: { GREETING: "hi" },
    });
    expect(res.status).toBe(202);
    const box = await waitForBox(cp, "alpha", "running");
    expect(box.ip).toBe("10.0.0.2");

    const [job] = await boxJobs(cp, "alpha");
    expect(job).toMatchObject({
      action: "create",
      status: "succeeded",
      error: null,
      result: { ip: "10.0.0.2" },
    });
    const names = job.steps.map((s: any) => s.name);
    expect(names).toEqual([
      "check_state",
      "allocate_ip",
      "prepare_disks",
      "setup_network",
      "restore_vm",
      "apply_identity",
      "wait_ready",
      "add_routes",
    ]);
    for (const s of job.steps) {
      expect(STEP_NAMES).toContain(s.name);
      expect(s.status).toBe("succeeded");
      expect(Date.parse(s.finishedAt)).toBeGreaterThanOrEqual(Date.parse(s.startedAt));
      expect(s.detail).toBeNull();
    }

    expect(a.fake.calls).toContainEqual({ method: "createFromGolden", slug: "alpha" });
    const vm = a.fake.vm("alpha")!;
    expect(vm).toMatchObject({ state: "running", ip: "10.0.0.2", tap: "dbx0a000002" });
    const route = a.routes.get("alpha")!;
    expect(route.state).toBe("running");
    expect(route.upstream(8000)).toBe("10.0.0.2:8000");
    expect(route.owner).toBeTruthy();
    expect(a.agent.boxes.get("alpha")).toMatchObject({
      desiredState: "running",
      ip: "10.0.0.2",
      mac: "06:00:0a:00:00:02",
    });
    expect(a.agent.boxes.get("alpha")!.spec.env).toEqual({ GREETING: "hi" });
    // Every event reached the control plane.
    await waitFor("outbox drained", () => a.agent.jobs.backlog() === 0);
    // The heartbeat carries the inventory with addresses, and golden status per template.
    const inventory = await waitFor("inventory in a heartbeat", async () => {
      const res = await cp.env.cp.ctx.db.execute("SELECT inventory FROM servers");
      const rows = (res as unknown as { rows: Array<{ inventory: unknown[] }> }).rows;
      return rows[0]?.inventory.length ? rows[0].inventory : null;
    });
    expect(inventory).toEqual([{ slug: "alpha", state: "running", ip: "10.0.0.2" }]);
    const server = await cp.admin.get(`/api/v1/servers/${cp.serverName}`);
    expect(server.body.golden.minimal).toEqual({ status: "ready", version: "1" });
    expect(server.body.agentVersion).toBe(AGENT_PACKAGE_VERSION);
  });

  it("stops, starts and resets the box, keeping its address; reset gives the clone new secrets", async () => {
    expect((await cp.admin.post("/api/v1/boxes/alpha/stop")).status).toBe(202);
    await waitForBox(cp, "alpha", "stopped");
    expect(a.fake.vm("alpha")!.state).toBe("stopped");
    expect(a.routes.get("alpha")!.state).toBe("stopped");
    expect(a.agent.boxes.get("alpha")!.desiredState).toBe("stopped");

    expect((await cp.admin.post("/api/v1/boxes/alpha/start")).status).toBe(202);
    const started = await waitForBox(cp, "alpha", "running");
    expect(started.ip).toBe("10.0.0.2");
    expect(a.fake.calls).toContainEqual({ method: "start", slug: "alpha" });
    expect(a.routes.get("alpha")!.state).toBe("running");

    const before = a.fake.vm("alpha")!.machineId;
    expect((await cp.admin.post("/api/v1/boxes/alpha/reset")).status).toBe(202);
    const reset = await waitForBox(cp, "alpha", "running");
    await waitFor("reset job done", async () => (await boxJobs(cp, "alpha"))[0].status === "succeeded");
    expect(reset.ip).toBe("10.0.0.2");
    expect(a.fake.calls).toContainEqual({ method: "reset", slug: "alpha" });
    expect(a.fake.vm("alpha")!.machineId).not.toBe(before);

    const jobs = await boxJobs(cp, "alpha");
    expect(jobs.map((j: any) => [j.action, j.status])).toEqual([
      ["reset", "succeeded"],
      ["start", "succeeded"],
      ["stop", "succeeded"],
      ["create", "succeeded"],
    ]);
  });

  it("runs jobs for different boxes in parallel and gives each its own address", async () => {
    const slugs = ["beta", "gamma", "delta"];
    await Promise.all(slugs.map((name) => cp.admin.post("/api/v1/boxes", { template: "minimal", name })));
    const boxes = await Promise.all(slugs.map((s) => waitForBox(cp, s, "running")));
    const ips = new Set([...boxes.map((b) => b.ip), "10.0.0.2"]);
    expect(ips.size).toBe(4);
  });

  it("deletes a box: VM gone, route gone, address free for the next box", async () => {
    expect((await cp.admin.del("/api/v1/boxes/alpha")).status).toBe(202);
    await waitFor("alpha deleted", async () => (await cp.admin.get("/api/v1/boxes/alpha")).status === 404);
    await waitFor("outbox drained", () => a.agent.jobs.backlog() === 0);
    expect(a.fake.vm("alpha")).toBeUndefined();
    expect(a.routes.get("alpha")).toBeUndefined();
    expect(a.agent.ipPool.get("alpha")).toBeNull();
    expect(a.agent.boxes.get("alpha")).toBeNull();
    expect(await a.fake.listTaps()).not.toContain("dbx0a000002");

    await cp.admin.post("/api/v1/boxes", { template: "minimal", name: "epsilon" });
    const reused = await waitForBox(cp, "epsilon", "running");
    expect(reused.ip).toBe("10.0.0.2");
  });
});
