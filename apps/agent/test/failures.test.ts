import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ControlPlane } from "../src/control-plane.ts";
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

/**
 * The control plane only hands out well-formed jobs, so a job with an action or payload this
 * agent cannot read (a newer control plane, a bad row) is produced by rewriting a real claimed
 * job on its way in; its events go back to the real control plane as usual.
 */
function tampering(rewrite: Map<string, (job: { action: string; payload: unknown }) => void>) {
  return (cp: ControlPlane): ControlPlane => ({
    claim: async (max, waitMs, signal) => {
      const res = await cp.claim(max, waitMs, signal);
      for (const j of res.jobs) {
        const slug = (j.payload as { slug?: string }).slug ?? "";
        rewrite.get(slug)?.(j);
      }
      return res;
    },
    sendEvents: (id, events) => cp.sendEvents(id, events),
    heartbeat: (hb) => cp.heartbeat(hb),
    close: () => cp.close?.(),
  });
}

describe("clear job failures, no crash", () => {
  let cp: TestCp;
  let a: TestAgent;
  const rewrite = new Map<string, (job: { action: string; payload: unknown }) => void>();

  beforeAll(async () => {
    cp = await startCp();
    a = await startAgent({
      cpUrl: cp.url,
      token: cp.agentToken,
      config: { bridge: { cidr: "10.9.0.0/29" } },
      wrapCp: tampering(rewrite),
    });
    await waitForHeartbeat(cp);
  });
  afterAll(async () => {
    await a?.close();
    await cp?.close();
  });

  it("fails a job with an unknown action with a clear error", async () => {
    rewrite.set("odd", (j) => {
      j.action = "explode";
    });
    await cp.admin.post("/api/v1/boxes", { template: "minimal", name: "odd" });
    const box = await waitForBox(cp, "odd", "error");
    expect(box.statusReason).toBe(
      'unknown action "explode": this agent handles create, start, stop, delete, reset, hibernate, build_golden, build_image',
    );
    expect(box.errorCode).toBe("unknown_action");
    const [job] = await boxJobs(cp, "odd");
    expect(job).toMatchObject({ status: "failed", error: box.statusReason, errorCode: "unknown_action" });
    expect(a.fake.calls.filter((c) => c.slug === "odd")).toEqual([]);
  });

  it("fails a job whose payload does not match its schema, naming the bad fields", async () => {
    rewrite.set("mangled", (j) => {
      j.payload = { slug: "mangled", template: 42, vcpu: -1 };
    });
    await cp.admin.post("/api/v1/boxes", { template: "minimal", name: "mangled" });
    const box = await waitForBox(cp, "mangled", "error");
    expect(box.statusReason).toMatch(/^invalid create payload: /);
    expect(box.errorCode).toBe("invalid_payload");
    expect(box.statusReason).toContain("template:");
    expect(box.statusReason).toContain("vcpu:");
    expect(box.statusReason).toContain("memoryMb:");
    expect(a.agent.ipPool.get("mangled")).toBeNull();
  });

  it("fails a create when the /29 pool is exhausted, and keeps working afterwards", async () => {
    // 10.9.0.0/29: .0 network, .1 gateway, .2–.5 boxes, .6 golden, .7 broadcast.
    const names = ["pool-1", "pool-2", "pool-3", "pool-4"];
    await Promise.all(names.map((name) => cp.admin.post("/api/v1/boxes", { template: "minimal", name })));
    const boxes = await Promise.all(names.map((s) => waitForBox(cp, s, "running")));
    expect(boxes.map((b) => b.ip).sort()).toEqual(["10.9.0.2", "10.9.0.3", "10.9.0.4", "10.9.0.5"]);

    await cp.admin.post("/api/v1/boxes", { template: "minimal", name: "pool-5" });
    const full = await waitForBox(cp, "pool-5", "error");
    expect(full.statusReason).toBe("no free address in 10.9.0.0/29: all 4 box addresses are allocated");
    expect(full.errorCode).toBe("ip_pool_exhausted");
    const [job] = await boxJobs(cp, "pool-5");
    expect(job.errorCode).toBe("ip_pool_exhausted");
    expect(job.steps.find((s: any) => s.name === "allocate_ip")).toMatchObject({ status: "failed" });
    expect(a.fake.vm("pool-5")).toBeUndefined();

    // Deleting a box frees its address; the agent is still alive and claims new work.
    await cp.admin.del("/api/v1/boxes/pool-2");
    await waitFor("pool-2 deleted", async () => (await cp.admin.get("/api/v1/boxes/pool-2")).status === 404);
    await cp.admin.post("/api/v1/boxes", { template: "minimal", name: "pool-6" });
    expect((await waitForBox(cp, "pool-6", "running")).ip).toBe("10.9.0.3");
  });

  it("fails a create for a template without golden that may not cold-boot", async () => {
    a.agent.config.templates.push({
      name: "code",
      version: "1",
      readyPorts: [8888],
      memoryMb: 2048,
      vcpu: 1,
    });
    // The control plane places "code" only where a golden is ready: pretend one was, then lose it.
    await cp.env.cp.ctx.db.execute(
      "INSERT INTO server_templates (server_id, template, status, version, updated_at) SELECT id, 'code', 'ready', '1', now() FROM servers",
    );
    const res = await cp.admin.post("/api/v1/boxes", { template: "code", name: "nogold" });
    expect(res.status).toBe(202);
    const box = await waitForBox(cp, "nogold", "error");
    expect(box.statusReason).toBe(
      'template "code" has no golden snapshot on this host (missing); only the default template "minimal" may cold-boot',
    );
    expect(box.errorCode).toBe("no_golden");
    expect(a.agent.ipPool.get("nogold")).toBeNull();
  });
});
