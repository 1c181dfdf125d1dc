import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { logOnlyReporter } from "../src/jobs/reporter.ts";
import {
  startAgent,
  startCp,
  type TestAgent,
  type TestCp,
  waitFor,
  waitForBox,
  waitForHeartbeat,
} from "./support/agent-harness.ts";

describe("reconcile", () => {
  let cp: TestCp;
  let a: TestAgent;

  beforeAll(async () => {
    cp = await startCp();
    a = await startAgent({ cpUrl: cp.url, token: cp.agentToken });
    await waitForHeartbeat(cp);
    await cp.admin.post("/api/v1/boxes", { template: "minimal", name: "phoenix" });
    await cp.admin.post("/api/v1/boxes", { template: "minimal", name: "resting" });
    await waitForBox(cp, "phoenix", "running");
    await waitForBox(cp, "resting", "running");
    await cp.admin.post("/api/v1/boxes/resting/stop");
    await waitForBox(cp, "resting", "stopped");
    await a.agent.runner.idle();
  });
  afterAll(async () => {
    await a?.close();
    await cp?.close();
  });

  it("starts again a box that should run but whose VMM died, and leaves a stopped box alone", async () => {
    a.fake.kill("phoenix");
    expect(await a.fake.inspect("phoenix")).toBe("exited");
    const actions = await a.agent.reconciler.reconcileOnce();
    expect(actions).toEqual([{ kind: "restarted", slug: "phoenix" }]);
    expect(await a.fake.inspect("phoenix")).toBe("running");
    expect(await a.fake.inspect("resting")).toBe("stopped");
    expect(a.routes.get("phoenix")?.state).toBe("running");
    expect(a.routes.get("phoenix")?.upstream(8888)).toBe(`${a.agent.ipPool.get("phoenix")}:8888`);
    // Nothing left to do: a second pass changes nothing.
    expect(await a.agent.reconciler.reconcileOnce()).toEqual([]);
  });

  it("does not start behind the control plane's back a box whose start failed", async () => {
    await cp.admin.post("/api/v1/boxes", { template: "minimal", name: "unlucky" });
    await waitForBox(cp, "unlucky", "running");
    await cp.admin.post("/api/v1/boxes/unlucky/stop");
    await waitForBox(cp, "unlucky", "stopped");
    const full = Object.assign(new Error("ENOSPC: no space left on device, write"), { code: "ENOSPC" });
    a.fake.failNext("start", "unlucky", full);
    await cp.admin.post("/api/v1/boxes/unlucky/start");
    expect(await waitForBox(cp, "unlucky", "error")).toMatchObject({ errorCode: "disk_full" });
    await a.agent.runner.idle();
    // The control plane shows it in error, so it stays down (even once the disk has room).
    expect(a.agent.boxes.get("unlucky")?.desiredState).toBe("stopped");
    expect(await a.agent.reconciler.reconcileOnce()).toEqual([]);
    expect(await a.fake.inspect("unlucky")).toBe("stopped");
    // The user's next start asks again, and it runs.
    await cp.admin.post("/api/v1/boxes/unlucky/start");
    await waitForBox(cp, "unlucky", "running");
    expect(a.agent.boxes.get("unlucky")?.desiredState).toBe("running");
    expect((await cp.admin.del("/api/v1/boxes/unlucky")).status).toBe(202);
    await waitFor(
      "unlucky deleted",
      async () => (await cp.admin.get("/api/v1/boxes/unlucky")).status === 404,
    );
    await a.agent.runner.idle();
  });

  it("lets a guest its VMM paused on a disk write error run again", async () => {
    a.fake.pauseOnIoError("phoenix");
    expect(await a.agent.reconciler.reconcileOnce()).toEqual([
      { kind: "resumed_io_paused", slug: "phoenix" },
    ]);
    expect(await a.agent.reconciler.reconcileOnce()).toEqual([]);
    // A stopped box is nobody's to resume.
    a.fake.pauseOnIoError("resting");
    expect(await a.agent.reconciler.reconcileOnce()).toEqual([]);
    expect(await a.fake.resumeIfIoPaused("resting")).toBe(true);
  });

  it("resumes a paused guest while another box's restart is still booting", async () => {
    await cp.admin.post("/api/v1/boxes", { template: "minimal", name: "steady" });
    await waitForBox(cp, "steady", "running");
    await a.agent.runner.idle();
    const starts = () => a.fake.calls.filter((c) => c.method === "start" && c.slug === "phoenix").length;
    const before = starts();
    const release = a.fake.holdStarts("phoenix");
    try {
      a.fake.kill("phoenix");
      a.agent.reconciler.wake();
      await waitFor("phoenix's restart", () => starts() > before);
      a.fake.pauseOnIoError("steady");
      a.agent.reconciler.wake();
      await waitFor("steady to be resumed", () => !a.fake.isIoPaused("steady"), 5_000);
      expect(await a.fake.inspect("phoenix")).toBe("exited");
    } finally {
      release();
    }
    await waitFor("phoenix to run", async () => (await a.fake.inspect("phoenix")) === "running");
  });

  it("removes VMs, TAPs and addresses that belong to no box", async () => {
    a.fake.plantOrphan("ghost", "10.0.0.200");
    a.fake.plantTap("dbx0a0000c8");
    a.agent.ipPool.allocate("nobody");
    const actions = await a.agent.reconciler.reconcileOnce();
    expect(actions).toEqual(
      expect.arrayContaining([
        { kind: "removed_vm", slug: "ghost" },
        { kind: "freed_ip", slug: "nobody", ip: expect.any(String) },
        { kind: "removed_tap", tap: "dbx0a0000c8" },
      ]),
    );
    expect(actions).toHaveLength(3);
    expect(a.fake.vm("ghost")).toBeUndefined();
    expect(await a.fake.listTaps()).not.toContain("dbx0a0000c8");
    expect(a.agent.ipPool.get("nobody")).toBeNull();
    // Real boxes were not touched.
    expect(await a.fake.inspect("phoenix")).toBe("running");
    expect(await a.fake.inspect("resting")).toBe("stopped");
    expect(a.agent.ipPool.get("resting")).not.toBeNull();
  });

  it("rebuilds the route table from the store and the executor (agent restart)", async () => {
    a.routes.delete("phoenix");
    a.routes.delete("resting");
    const actions = await a.agent.reconciler.reconcileOnce();
    expect(actions).toEqual(
      expect.arrayContaining([
        { kind: "route_restored", slug: "phoenix" },
        { kind: "route_restored", slug: "resting" },
      ]),
    );
    expect(a.routes.get("phoenix")?.state).toBe("running");
    expect(a.routes.get("resting")?.state).toBe("stopped");
  });

  it("reloads the edge config through the keeper when one is wired", async () => {
    // The edge's EdgeConfigKeeper is exercised against real Caddy in test/edge; here the
    // reconciler's use of the interface is checked with a keeper that reports a reload.
    const { Reconciler } = await import("../src/loops/reconcile.ts");
    let calls = 0;
    const r = new Reconciler({
      handlers: {
        config: a.agent.config,
        executor: a.fake,
        network: a.fake,
        ipPool: a.agent.ipPool,
        boxes: a.agent.boxes,
        routes: a.routes,
        imageBuilder: null,
        images: null,
        clock: { now: () => new Date() },
        log: a.agent.api.log as never,
      },
      runner: a.agent.runner,
      metrics: a.agent.metrics,
      log: a.agent.api.log as never,
      report: logOnlyReporter({ now: () => new Date() }, a.agent.metrics, a.agent.api.log as never),
      expected: () => null,
      intervalMs: 60_000,
      edge: {
        ensureConfig: async () => {
          calls++;
          return calls === 1 ? "loaded" : "unchanged";
        },
      },
    });
    expect(await r.reconcileOnce()).toEqual([{ kind: "edge_reloaded" }]);
    expect(await r.reconcileOnce()).toEqual([]);
  });
});
