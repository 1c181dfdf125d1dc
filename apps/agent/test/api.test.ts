import { ERROR_STATUS, ErrorBody, type ErrorCode } from "@doppio/contracts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  AGENT_PACKAGE_VERSION,
  API_TOKEN,
  startAgent,
  startCp,
  type TestAgent,
  type TestCp,
  waitFor,
  waitForBox,
  waitForHeartbeat,
} from "./support/agent-harness.ts";

describe("agent HTTP API", () => {
  let cp: TestCp;
  let a: TestAgent;
  let base: string;
  const json = async (res: Response): Promise<any> => res.json();
  const get = (path: string, token?: string) =>
    fetch(`${base}${path}`, { headers: token === undefined ? {} : { authorization: `Bearer ${token}` } });

  beforeAll(async () => {
    cp = await startCp();
    a = await startAgent({
      cpUrl: cp.url,
      token: cp.agentToken,
      listen: true,
      fake: { golden: { minimal: "missing" } },
    });
    base = a.apiUrl!;
    await waitForHeartbeat(cp);
  });
  afterAll(async () => {
    await a?.close();
    await cp?.close();
  });

  it("answers /health without a token", async () => {
    const res = await get("/health");
    expect(res.status).toBe(200);
    const body = (await res.json()) as { lastHeartbeatAt: string };
    // The agent has heartbeated by now (the harness waits for it): deploy-agent.yml waits on this.
    expect(body).toEqual({
      ok: true,
      version: AGENT_PACKAGE_VERSION,
      backend: "qemu",
      lastHeartbeatAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
    });
    expect(Date.parse(body.lastHeartbeatAt)).toBeLessThanOrEqual(Date.now());
  });

  it("refuses every other route with a missing or wrong token, the same way", async () => {
    for (const path of ["/vms", "/vms/anything", "/golden-snapshot/status", "/metrics"]) {
      for (const token of [undefined, "", "wrong-token", `${API_TOKEN}x`, API_TOKEN.slice(0, -1)]) {
        const res = await get(path, token);
        expect(res.status, `${path} with ${token}`).toBe(401);
        expect(await res.json()).toEqual({
          error: { code: "unauthorized", message: "missing or wrong bearer token" },
        });
      }
    }
    const post = await fetch(`${base}/golden-snapshot/build`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ template: "minimal" }),
    });
    expect(post.status).toBe(401);
    expect(a.fake.calls.filter((c) => c.method === "buildGolden")).toEqual([]);
  });

  it("builds a golden snapshot on request and reports its status; the control plane hears of it", async () => {
    const before = await json(await get("/golden-snapshot/status", API_TOKEN));
    expect(before.templates.minimal.status).toBe("missing");

    const bad = await fetch(`${base}/golden-snapshot/build`, {
      method: "POST",
      headers: { authorization: `Bearer ${API_TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify({ template: "nope" }),
    });
    expect(bad.status).toBe(404);

    const res = await fetch(`${base}/golden-snapshot/build`, {
      method: "POST",
      headers: { authorization: `Bearer ${API_TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify({ template: "minimal" }),
    });
    expect(res.status).toBe(202);
    const { job } = await json(res);
    expect(job).toMatch(/^local-/);
    const status = await waitFor("golden ready", async () => {
      const s = await json(await get("/golden-snapshot/status", API_TOKEN));
      return s.templates.minimal.status === "ready" ? s : null;
    });
    expect(status.builds[0]).toMatchObject({
      id: job,
      template: "minimal",
      status: "done",
      ok: true,
      local: true,
    });
    // A local job's events never go to the control plane, but the heartbeat carries the result.
    expect(a.agent.jobs.backlog()).toBe(0);
    await waitFor("control plane sees the golden", async () => {
      const s = await cp.admin.get(`/api/v1/servers/${cp.serverName}`);
      return s.body.golden.minimal?.status === "ready";
    });
  });

  it("lists VMs and shows one; an unknown slug is 404", async () => {
    await cp.admin.post("/api/v1/boxes", { template: "minimal", name: "listed" });
    await waitForBox(cp, "listed", "running");
    const list = await json(await get("/vms", API_TOKEN));
    expect(list.vms).toEqual([
      expect.objectContaining({ slug: "listed", state: "running", desiredState: "running", ip: "10.0.0.2" }),
    ]);
    const one = await get("/vms/listed", API_TOKEN);
    expect(await json(one)).toMatchObject({
      slug: "listed",
      state: "running",
      template: "minimal",
      tap: "dbx0a000002",
    });
    for (const slug of ["missing-box", "../etc", "NOPE"]) {
      const res = await get(`/vms/${encodeURIComponent(slug)}`, API_TOKEN);
      expect(res.status).toBe(404);
      expect((await json(res)).error.code).toBe("not_found");
    }
  });

  it("answers every error with the contracts' error body and its code's status", async () => {
    const auth = { authorization: `Bearer ${API_TOKEN}`, "content-type": "application/json" };
    const build = (body: string) =>
      fetch(`${base}/golden-snapshot/build`, { method: "POST", headers: auth, body });
    const answers = [
      await get("/vms"),
      await get("/no-such-route", API_TOKEN),
      await get("/vms/missing-box", API_TOKEN),
      await build(JSON.stringify({})),
      await build(JSON.stringify({ template: "nope" })),
      await build("{not json"),
    ];
    const seen = [];
    for (const res of answers) {
      const body = await json(res);
      expect(ErrorBody.strict().parse(body)).toEqual(body);
      expect(Object.keys(body.error).sort()).toEqual(["code", "message"]);
      expect(res.status).toBe(ERROR_STATUS[body.error.code as ErrorCode]);
      seen.push(body.error.code);
    }
    expect(seen).toEqual([
      "unauthorized",
      "not_found",
      "not_found",
      "validation_failed",
      "not_found",
      "bad_request",
    ]);
  });

  it("exposes metrics: jobs, step durations, outbox backlog, reconcile actions", async () => {
    await a.agent.reconciler.reconcileOnce();
    const text = await (await get("/metrics", API_TOKEN)).text();
    expect(text).toMatch(/doppio_agent_jobs_total\{action="create",outcome="succeeded"\} 1/);
    expect(text).toMatch(/doppio_agent_jobs_total\{action="build_golden",outcome="succeeded"\} 1/);
    expect(text).toMatch(
      /doppio_agent_step_duration_seconds_count\{step="restore_vm",outcome="succeeded"\} 1/,
    );
    expect(text).toMatch(/doppio_agent_outbox_backlog \d+/);
    expect(text).toContain("doppio_agent_reconcile_actions_total");
  });
});
