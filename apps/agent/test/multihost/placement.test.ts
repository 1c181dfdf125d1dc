import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { livenessTick } from "../../../api/src/services/periodic.ts";
import { registerServer, type TestClient } from "../../../api/test/support/client.ts";
import { startControlPlane, type TestControlPlane } from "../../../api/test/support/control-plane.ts";
import { startAgent, type TestAgent, waitFor } from "../support/agent-harness.ts";

const HOSTS = ["host-a", "host-b", "host-c"] as const;
type Host = (typeof HOSTS)[number];
/** Room for four small boxes (1 vCPU, 2 GiB, 10 GB) per host. */
const CAPACITY = { vcpu: 4, memoryMb: 8192, diskGb: 40 };

/**
 * Three hosts, each with the real agent core (fake executor), against one real control
 * plane: where boxes land, what drain and disable do, and what a host that goes silent
 * and comes back looks like to its users.
 */
describe("several hosts", () => {
  let cp: TestControlPlane;
  let admin: TestClient;
  const tokens = new Map<Host, string>();
  const agents = new Map<Host, TestAgent>();
  let n = 0;

  beforeAll(async () => {
    // A host silent for 1.5 s is unreachable (agents heartbeat every 0.5 s here).
    cp = await startControlPlane({ config: { heartbeatFreshMs: 1_500 } });
    admin = await cp.admin();
    for (const host of HOSTS) {
      const agent = await registerServer(admin, host, { capacity: CAPACITY });
      tokens.set(host, agent.bearerToken!);
      agents.set(
        host,
        await startAgent({
          cpUrl: cp.url,
          token: agent.bearerToken!,
          config: { domain: `${host}.example.test` },
        }),
      );
    }
    await waitFor("three heartbeats", async () => {
      const list = (await admin.get("/api/v1/servers")).body.servers as Array<{
        lastHeartbeatAt: string | null;
      }>;
      return list.every((s) => s.lastHeartbeatAt !== null);
    });
  });

  afterAll(async () => {
    for (const agent of agents.values()) await agent.close();
    await cp?.close();
  });

  async function box(slug: string) {
    return (await admin.get(`/api/v1/boxes/${slug}`)).body;
  }

  async function create(): Promise<{ slug: string; server: Host }> {
    const res = await admin.post("/api/v1/boxes", { template: "minimal", size: "small", name: `mh-${n++}` });
    expect(res.status).toBe(202);
    const slug = res.body.box.slug as string;
    await waitFor(`${slug} running`, async () => (await box(slug)).status === "running");
    return { slug, server: res.body.box.server };
  }

  async function act(slug: string, action: string) {
    return admin.post(`/api/v1/boxes/${slug}/${action}`);
  }

  const placed = new Map<Host, string[]>();

  it("spreads boxes over the hosts by free capacity", async () => {
    for (let i = 0; i < 6; i++) {
      const { slug, server } = await create();
      placed.set(server, [...(placed.get(server) ?? []), slug]);
    }
    expect(HOSTS.map((h) => placed.get(h)?.length ?? 0)).toEqual([2, 2, 2]);
    // Each box runs on the host the control plane says (that host's VMM started it).
    for (const host of HOSTS) {
      for (const slug of placed.get(host)!) expect(agents.get(host)!.fake.vm(slug)?.state).toBe("running");
    }
  });

  it("puts nothing new on a draining host; its boxes keep running and take their actions", async () => {
    expect((await admin.post("/api/v1/servers/host-a/actions", { action: "drain" })).body.status).toBe(
      "draining",
    );
    const landed = [await create(), await create()];
    expect(landed.map((b) => b.server)).not.toContain("host-a");
    const [kept] = placed.get("host-a")!;
    expect((await box(kept!)).status).toBe("running");
    expect((await act(kept!, "stop")).status).toBe(202);
    await waitFor("a stop on the draining host", async () => (await box(kept!)).status === "stopped");
    expect((await admin.post("/api/v1/servers/host-a/actions", { action: "activate" })).body.status).toBe(
      "active",
    );
  });

  it("gives a disabled host no new boxes and no jobs until it is active again", async () => {
    await admin.post("/api/v1/servers/host-b/actions", { action: "disable" });
    expect((await create()).server).not.toBe("host-b");
    const [held] = placed.get("host-b")!;
    expect((await act(held!, "stop")).status).toBe(202);
    // Heartbeats go on, the job waits: after several claim rounds it is still queued.
    await new Promise((r) => setTimeout(r, 2_500));
    const jobs = (await admin.get(`/api/v1/boxes/${held}/jobs`)).body.jobs;
    expect(jobs[0]).toMatchObject({ action: "stop", status: "pending" });
    expect((await box(held!)).status).toBe("stopping");
    await admin.post("/api/v1/servers/host-b/actions", { action: "activate" });
    await waitFor("the held stop to run", async () => (await box(held!)).status === "stopped");
  });

  it("shows a silent host's boxes as unknown, moves none of them, and restores them when it is back", async () => {
    const lost = placed.get("host-c")!;
    await agents.get("host-c")!.close();
    agents.delete("host-c");
    await waitFor("host-c unreachable", async () => {
      await livenessTick(cp.cp.ctx);
      return (await admin.get("/api/v1/servers/host-c")).body.unreachableSince !== null;
    });
    for (const slug of lost) {
      const b = await box(slug);
      expect(b).toMatchObject({ status: "unknown", server: "host-c", allowedActions: [] });
      const refused = await act(slug, "stop");
      expect(refused.status).toBe(409);
    }
    // New boxes go elsewhere; the lost ones stay where their disks are.
    expect((await create()).server).not.toBe("host-c");
    for (const slug of lost) expect((await box(slug)).server).toBe("host-c");

    // The host comes back (a new agent process on it, same token): its boxes show their state again.
    agents.set(
      "host-c",
      await startAgent({
        cpUrl: cp.url,
        token: tokens.get("host-c")!,
        config: { domain: "host-c.example.test" },
      }),
    );
    await waitFor(
      "host-c back",
      async () => (await admin.get("/api/v1/servers/host-c")).body.unreachableSince === null,
    );
    for (const slug of lost) expect((await box(slug)).status).toBe("running");
  });
});
