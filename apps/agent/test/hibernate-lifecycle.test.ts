import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  boxJobs,
  startWithRunningBox,
  type TestAgent,
  type TestCp,
  waitFor,
  waitForBox,
} from "./support/agent-harness.ts";
import { FakeExecutor } from "./support/fake-executor.ts";

// The hibernate action end to end through the real control plane and agent core (the VMM
// is the recording fake; real QEMU is in test/qemu/hibernate.test.ts).
describe("hibernate and resume through the control plane and the agent", () => {
  let cp: TestCp;
  let a: TestAgent;

  beforeAll(async () => {
    ({ cp, a } = await startWithRunningBox("naps"));
  });
  afterAll(async () => {
    await a?.close();
    await cp?.close();
  });

  it("hibernate: the VMM saves and ends, the box shows hibernated with its memory file's size", async () => {
    const res = await cp.admin.post("/api/v1/boxes/naps/hibernate");
    expect(res.status).toBe(202);
    expect(res.body.box.status).toBe("hibernating");
    const box = await waitForBox(cp, "naps", "hibernated");
    expect(box).toMatchObject({
      memoryFileBytes: FakeExecutor.MEMORY_FILE_BYTES,
      desiredState: "stopped",
      allowedActions: ["start", "stop", "reset", "delete"],
      ip: "10.0.0.2",
    });
    const [job] = await boxJobs(cp, "naps");
    expect(job).toMatchObject({
      action: "hibernate",
      status: "succeeded",
      result: { ip: "10.0.0.2", memoryFileBytes: FakeExecutor.MEMORY_FILE_BYTES },
    });
    expect(job.steps.map((s: { name: string }) => s.name)).toEqual([
      "check_state",
      "remove_routes",
      "hibernate_vm",
      "teardown_network",
    ]);
    expect(a.fake.vm("naps")!.state).toBe("hibernated");
    expect(a.routes.get("naps")!.state).toBe("hibernated");
    expect(a.agent.boxes.get("naps")!.desiredState).toBe("stopped");
  });

  it("reconcile leaves a hibernated box alone and the heartbeat reports it", async () => {
    await a.agent.reconciler.reconcileOnce();
    expect(a.fake.vm("naps")!.state).toBe("hibernated");
    await waitFor("inventory says hibernated", async () => {
      const res = await cp.env.cp.ctx.db.execute("SELECT inventory FROM servers");
      const rows = (res as unknown as { rows: Array<{ inventory: Array<{ state: string }> }> }).rows;
      return rows[0]?.inventory[0]?.state === "hibernated" ? true : null;
    });
  });

  it("a second hibernate is refused while it is hibernated; start resumes it", async () => {
    expect((await cp.admin.post("/api/v1/boxes/naps/hibernate")).status).toBe(409);
    expect((await cp.admin.post("/api/v1/boxes/naps/start")).status).toBe(202);
    const box = await waitForBox(cp, "naps", "running");
    expect(box).toMatchObject({ memoryFileBytes: null, ip: "10.0.0.2" });
    const [job] = await boxJobs(cp, "naps");
    expect(job.steps.map((s: { name: string }) => s.name)).toContain("resume_vm");
    expect(a.routes.get("naps")!.state).toBe("running");
  });

  it("stop of a hibernated box discards its memory: the next start boots", async () => {
    await cp.admin.post("/api/v1/boxes/naps/hibernate");
    await waitForBox(cp, "naps", "hibernated");
    expect((await cp.admin.post("/api/v1/boxes/naps/stop")).status).toBe(202);
    expect(await waitForBox(cp, "naps", "stopped")).toMatchObject({ memoryFileBytes: null });
    expect(a.fake.vm("naps")!.state).toBe("stopped");
    await cp.admin.post("/api/v1/boxes/naps/start");
    await waitForBox(cp, "naps", "running");
    const [job] = await boxJobs(cp, "naps");
    expect(job.steps.map((s: { name: string }) => s.name)).toContain("boot_vm");
  });
});

// A box whose VMM already died (guest crash, kill -9) has no memory to keep: hibernate's
// desired state (stopped) is still reachable, so the job succeeds as a plain stop and says why.
describe("a hibernate whose save fails while the VMM lives on", () => {
  let cp: TestCp;
  let a: TestAgent;

  beforeAll(async () => {
    ({ cp, a } = await startWithRunningBox("awake"));
  });
  afterAll(async () => {
    await a?.close();
    await cp?.close();
  });

  it("leaves the box running and routed at both ends, the job failed with the save's error", async () => {
    const full = Object.assign(new Error("write vmstate: no space left on device"), { code: "ENOSPC" });
    a.fake.failNext("hibernate", "awake", new Error("saving the memory failed", { cause: full }));
    expect((await cp.admin.post("/api/v1/boxes/awake/hibernate")).status).toBe(202);
    const box = await waitFor("the failed hibernate to settle", async () => {
      const b = (await cp.admin.get("/api/v1/boxes/awake")).body;
      return b.status === "running" && b.statusReason ? b : null;
    });
    expect(box).toMatchObject({
      desiredState: "running",
      statusReason: "hibernate failed: saving the memory failed",
      errorCode: "disk_full",
      memoryFileBytes: null,
    });
    const [job] = await boxJobs(cp, "awake");
    expect(job).toMatchObject({ action: "hibernate", status: "failed", errorCode: "disk_full" });
    expect(a.fake.vm("awake")!.state).toBe("running");
    expect(a.routes.get("awake")!.state).toBe("running");
    expect(a.agent.boxes.get("awake")!.desiredState).toBe("running");
    // It hibernates once there is room.
    expect((await cp.admin.post("/api/v1/boxes/awake/hibernate")).status).toBe(202);
    expect(await waitForBox(cp, "awake", "hibernated")).toMatchObject({
      statusReason: null,
      errorCode: null,
    });
  });
});

describe("hibernate of a box whose VMM has exited", () => {
  let cp: TestCp;
  let a: TestAgent;

  beforeAll(async () => {
    ({ cp, a } = await startWithRunningBox("crashed"));
  });
  afterAll(async () => {
    await a?.close();
    await cp?.close();
  });

  it("settles stopped with its TAP released, the job succeeding and saying the memory was lost", async () => {
    const tap = a.fake.vm("crashed")!.tap;
    expect(await a.fake.listTaps()).toContain(tap);
    a.fake.kill("crashed");
    expect(await a.fake.inspect("crashed")).toBe("exited");
    expect((await cp.admin.post("/api/v1/boxes/crashed/hibernate")).status).toBe(202);
    const box = await waitForBox(cp, "crashed", "stopped");
    expect(box).toMatchObject({ desiredState: "stopped", memoryFileBytes: null, ip: "10.0.0.2" });
    expect(box.statusReason).toMatch(/VMM had already exited/);
    const [job] = await boxJobs(cp, "crashed");
    expect(job).toMatchObject({ action: "hibernate", status: "succeeded", errorCode: null });
    expect(job.result).toMatchObject({ ip: "10.0.0.2", memoryFileBytes: 0 });
    expect(job.result.memoryLost).toMatch(/no memory to keep/);
    const steps = job.steps as Array<{ name: string; status: string; detail: string | null }>;
    expect(steps.map((s) => s.name)).toEqual(["check_state", "remove_routes", "stop_vm", "teardown_network"]);
    expect(steps[0]!.detail).toMatch(/no memory to keep/);
    expect(job.log).toContain("no memory to keep");
    expect(a.fake.vm("crashed")!.state).toBe("stopped");
    expect(await a.fake.listTaps()).not.toContain(tap);
    expect(a.routes.get("crashed")!.state).toBe("stopped");
    expect(a.agent.boxes.get("crashed")!.desiredState).toBe("stopped");
    // Nothing restarts it; a start boots its disks.
    await a.agent.reconciler.reconcileOnce();
    expect(a.fake.vm("crashed")!.state).toBe("stopped");
    expect((await cp.admin.post("/api/v1/boxes/crashed/start")).status).toBe(202);
    await waitForBox(cp, "crashed", "running");
    const [start] = await boxJobs(cp, "crashed");
    expect(start.steps.map((s: { name: string }) => s.name)).toContain("boot_vm");
  });

  it("a stop of an exited box releases its TAP too", async () => {
    const tap = a.fake.vm("crashed")!.tap;
    a.fake.kill("crashed");
    expect((await cp.admin.post("/api/v1/boxes/crashed/stop")).status).toBe(202);
    await waitForBox(cp, "crashed", "stopped");
    expect(a.fake.vm("crashed")!.state).toBe("stopped");
    expect(await a.fake.listTaps()).not.toContain(tap);
  });
});
