import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hibernateIdleBoxes } from "../src/services/idle.ts";
import { heartbeat, registerServer, signedInClient, type TestClient } from "./support/client.ts";
import {
  DB_KINDS,
  dbUnavailable,
  startControlPlane,
  type TestControlPlane,
} from "./support/control-plane.ts";

/**
 * Idle hibernation and wake-on-request at the control plane, on both databases: the agent
 * reports use with its heartbeats, the idle sweep hibernates what ran out, keep-awake resets
 * the timer, the agent's wake resumes a hibernated box. Time is the control plane's clock.
 */
/** The platform's default for new accounts here (the shipped default is 30). */
const PLATFORM_DEFAULT = 45;

for (const kind of DB_KINDS) {
  const why = dbUnavailable(kind);
  if (why) console.warn(`SKIPPING "idle hibernation" on ${kind}: ${why}`);
  describe.skipIf(why !== null)(`idle hibernation [${kind}]`, () => {
    let env: TestControlPlane;
    let owner: TestClient;
    let stranger: TestClient;
    let agent: TestClient;
    let otherAgent: TestClient;
    let now = Date.UTC(2026, 11, 1, 9, 0, 0);
    const at = () => new Date(now).toISOString();
    const minutes = (m: number) => {
      now += m * 60_000;
    };

    /** The agent claims the box's pending job and reports it done with `data`. */
    async function finishJob(action: string, data: Record<string, unknown>) {
      const res = await agent.post("/agent/v1/jobs/claim", { waitMs: 0 });
      const job = res.body.jobs.find((j: { action: string }) => j.action === action);
      expect(job, `a ${action} job`).toBeDefined();
      const events = [{ seq: 1, at: at(), type: "result", ok: true, data }];
      expect((await agent.post(`/agent/v1/jobs/${job.id}/events`, { events })).status).toBe(200);
      return job;
    }
    const box = async (slug: string) => (await owner.get(`/api/v1/boxes/${slug}`)).body;
    const sweep = () => hibernateIdleBoxes(env.cp.ctx);

    beforeAll(async () => {
      env = await startControlPlane({
        kind,
        clock: { now: () => new Date(now) },
        config: { idleTimeoutDefaultMinutes: PLATFORM_DEFAULT },
      });
      const admin = await env.admin();
      agent = await registerServer(admin, "idle-host");
      otherAgent = await registerServer(admin, "other-host");
      await agent.post("/agent/v1/heartbeat", heartbeat());
      owner = await signedInClient(env.url, "idle-owner");
      stranger = await signedInClient(env.url, "idle-stranger");
      expect((await owner.post("/api/v1/boxes", { template: "minimal", name: "sleepy" })).status).toBe(202);
      await finishJob("create", { ip: "10.0.0.21" });
      expect((await owner.post("/api/v1/boxes", { template: "minimal", name: "busy" })).status).toBe(202);
      await finishJob("create", { ip: "10.0.0.22" });
    });
    afterAll(async () => {
      await env?.close();
    });

    it("a new account starts with the platform's default; turned off, its boxes never hibernate", async () => {
      const fresh = await box("sleepy");
      expect(fresh).toMatchObject({ idleTimeoutMinutes: PLATFORM_DEFAULT, idleTimeoutCustom: false });
      expect(fresh.idleHibernatesAt).toBe(new Date(now + PLATFORM_DEFAULT * 60_000).toISOString());
      expect((await owner.request("PATCH", "/api/v1/me/idle", { idleTimeoutMinutes: null })).status).toBe(
        200,
      );
      minutes(24 * 60);
      expect(await sweep()).toEqual([]);
      expect(await box("sleepy")).toMatchObject({
        status: "running",
        idleTimeoutMinutes: null,
        idleHibernatesAt: null,
      });
    });

    it("the owner's default applies to boxes without their own; the view shows when", async () => {
      const res = await owner.request("PATCH", "/api/v1/me/idle", { idleTimeoutMinutes: 30 });
      expect(res.status).toBe(200);
      // Idle time counts from the last start (create), which is long ago: due now.
      const b = await box("sleepy");
      expect(b.idleTimeoutMinutes).toBe(30);
      expect(b.idleTimeoutCustom).toBe(false);
      expect(Date.parse(b.idleHibernatesAt)).toBeLessThanOrEqual(now);
      // The other box is used: its host reports a request a minute ago.
      const used = new Date(now - 60_000).toISOString();
      await agent.post(
        "/agent/v1/heartbeat",
        heartbeat(undefined, {
          vms: [{ slug: "busy", state: "running", ip: "10.0.0.22", lastActiveAt: used }],
        }),
      );
      expect((await box("busy")).idleHibernatesAt).toBe(
        new Date(Date.parse(used) + 30 * 60_000).toISOString(),
      );
    });

    it("another host cannot report use of a box that is not on it", async () => {
      const before = (await box("sleepy")).idleHibernatesAt;
      await otherAgent.post(
        "/agent/v1/heartbeat",
        heartbeat(undefined, {
          vms: [{ slug: "sleepy", state: "running", ip: "10.0.0.21", lastActiveAt: at() }],
        }),
      );
      expect((await box("sleepy")).idleHibernatesAt).toBe(before);
    });

    it("the sweep hibernates the idle box only; the job and status follow", async () => {
      expect(await sweep()).toEqual(["sleepy"]);
      expect(await box("sleepy")).toMatchObject({ status: "hibernating", desiredState: "stopped" });
      expect(await box("busy")).toMatchObject({ status: "running" });
      // A second sweep while the job is in flight queues nothing more.
      expect(await sweep()).toEqual([]);
      await finishJob("hibernate", { ip: "10.0.0.21", memoryFileBytes: 52_428_800 });
      expect(await box("sleepy")).toMatchObject({
        status: "hibernated",
        memoryFileBytes: 52_428_800,
        idleHibernatesAt: null,
        allowedActions: ["start", "stop", "reset", "delete"],
      });
      // Its saved memory is disk its host gives it: counted (in whole GiB) beside its own disk.
      const server = (await (await env.admin()).get("/api/v1/servers/idle-host")).body;
      expect(server.used.diskGb).toBe(2 * 10 + 1);
    });

    it("keep-awake resets the timer; only the owner can press it", async () => {
      minutes(29);
      expect((await stranger.post("/api/v1/boxes/busy/keep-awake")).status).toBe(404);
      const res = await owner.post("/api/v1/boxes/busy/keep-awake");
      expect(res.status).toBe(200);
      expect(res.body.idleHibernatesAt).toBe(new Date(now + 30 * 60_000).toISOString());
      minutes(29);
      expect(await sweep()).toEqual([]);
      minutes(2);
      expect(await sweep()).toEqual(["busy"]);
      await finishJob("hibernate", { ip: "10.0.0.22", memoryFileBytes: 1 });
    });

    it("a box's own timeout wins over the default, and 0 means never", async () => {
      const res = await owner.request("PATCH", "/api/v1/boxes/busy/idle", { idleTimeoutMinutes: 0 });
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({ idleTimeoutMinutes: null, idleTimeoutCustom: true });
      expect(
        (await stranger.request("PATCH", "/api/v1/boxes/busy/idle", { idleTimeoutMinutes: 5 })).status,
      ).toBe(404);
      expect(
        (await owner.request("PATCH", "/api/v1/boxes/busy/idle", { idleTimeoutMinutes: -1 })).status,
      ).toBe(400);
    });

    it("the host's wake resumes a hibernated box (once), another host's wake is a 404", async () => {
      expect((await otherAgent.post("/agent/v1/boxes/sleepy/wake", {})).status).toBe(404);
      const res = await agent.post("/agent/v1/boxes/sleepy/wake", {});
      expect(res.status).toBe(202);
      expect(res.body).toEqual({ waking: true, status: "starting" });
      // Repeated wakes while the start is in flight queue nothing more.
      expect((await agent.post("/agent/v1/boxes/sleepy/wake", {})).body).toEqual({
        waking: true,
        status: "starting",
      });
      const claimed = (await agent.post("/agent/v1/jobs/claim", { waitMs: 0 })).body.jobs;
      expect(claimed.map((j: { action: string }) => j.action)).toEqual(["start"]);
      const events = [{ seq: 1, at: at(), type: "result", ok: true, data: { ip: "10.0.0.21" } }];
      await agent.post(`/agent/v1/jobs/${claimed[0].id}/events`, { events });
      const b = await box("sleepy");
      expect(b).toMatchObject({ status: "running", memoryFileBytes: null });
      // The timer starts again from the resume.
      expect(b.idleHibernatesAt).toBe(new Date(now + 30 * 60_000).toISOString());
      // A running box is not woken.
      expect((await agent.post("/agent/v1/boxes/sleepy/wake", {})).status).toBe(409);
    });

    it("a hibernate that fails while the guest runs on leaves the box running, saying why, and the sweep waits a whole timeout", async () => {
      /** The agent claims the pending hibernate and reports it failed with `result`'s fields. */
      const failHibernate = async (result: Record<string, unknown>) => {
        const claimed = (await agent.post("/agent/v1/jobs/claim", { waitMs: 0 })).body.jobs;
        expect(claimed.map((j: { action: string }) => j.action)).toEqual(["hibernate"]);
        const events = [{ seq: 1, at: at(), type: "result", ok: false, ...result }];
        expect((await agent.post(`/agent/v1/jobs/${claimed[0].id}/events`, { events })).status).toBe(200);
      };
      minutes(31);
      expect(await sweep()).toEqual(["sleepy"]);
      const error = "saving the memory failed: no space left on device";
      await failHibernate({ code: "disk_full", error, boxRunning: true });
      expect(await box("sleepy")).toMatchObject({
        status: "running",
        desiredState: "running",
        statusReason: `hibernate failed: ${error}`,
        errorCode: "disk_full",
        idleHibernatesAt: new Date(now + 30 * 60_000).toISOString(),
      });
      expect(await sweep()).toEqual([]);
      minutes(31);
      expect(await sweep()).toEqual(["sleepy"]);
      // Without the agent saying the guest runs on, a failed hibernate is an error.
      await failHibernate({ code: "disk_full", error });
      expect(await box("sleepy")).toMatchObject({
        status: "error",
        statusReason: error,
        errorCode: "disk_full",
      });
    });
  });
}
