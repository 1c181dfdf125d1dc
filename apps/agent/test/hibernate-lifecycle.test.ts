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
import { FakeExecutor } from "./support/fake-executor.ts";

// The hibernate action end to end through the real control plane and agent core (the VMM
// is the recording fake; real QEMU is in test/qemu/hibernate.test.ts).
describe("hibernate and resume through the control plane and the agent", () => {
  let cp: TestCp;
  let a: TestAgent;

  beforeAll(async () => {
    cp = await startCp();
    a = await startAgent({ cpUrl: cp.url, token: cp.agentToken });
    await waitForHeartbeat(cp);
    expect((await cp.admin.post("/api/v1/boxes", { template: "minimal", name: "naps" })).status).toBe(202);
    await waitForBox(cp, "naps", "running");
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
