import { expect, it } from "vitest";
import { heartbeat, registerServer, signedInClient, type TestClient } from "./support/client.ts";
import { describeOnEachDb } from "./support/each-db.ts";

const pool = (template: string, target: number, ready: number, filling: number) => ({
  template,
  target,
  ready,
  filling,
});

/**
 * Warm-pool settings and state at the control plane: admins set sizes per server and
 * template, agents get them in heartbeat answers and report their pools back, the Servers
 * views show both, and placement prefers a host with a ready clone.
 */
describeOnEachDb("warm pools", (env) => {
  let admin: TestClient;
  let hostA: TestClient;
  let hostB: TestClient;

  async function setup() {
    admin ??= await env().admin();
    hostA ??= await registerServer(admin, "pool-a");
    hostB ??= await registerServer(admin, "pool-b");
  }

  it("sizes go to the agent with its heartbeat answer; its report shows on the server", async () => {
    await setup();
    // Nothing set: the answer carries no sizes (the agent keeps its configured ones).
    const before = await hostA.post("/agent/v1/heartbeat", heartbeat());
    expect(before.status).toBe(200);
    expect(before.body.warmPool).toBeUndefined();

    const set = await admin.request("PATCH", "/api/v1/servers/pool-a/warm-pool", { sizes: { minimal: 3 } });
    expect(set.status).toBe(200);
    expect(set.body.warmPool).toEqual([{ template: "minimal", size: 3, target: 0, ready: 0, filling: 0 }]);

    const answer = await hostA.post(
      "/agent/v1/heartbeat",
      heartbeat({ minimal: "ready" }, { pool: [pool("minimal", 3, 2, 1)] }),
    );
    expect(answer.body.warmPool).toEqual({ minimal: 3 });
    const server = await admin.get("/api/v1/servers/pool-a");
    expect(server.body.warmPool).toEqual([{ template: "minimal", size: 3, target: 3, ready: 2, filling: 1 }]);
    // Another host's answer carries none of it.
    expect((await hostB.post("/agent/v1/heartbeat", heartbeat())).body.warmPool).toBeUndefined();
  });

  it("only admins set sizes, for known templates, within bounds", async () => {
    await setup();
    const user = await signedInClient(env().url);
    expect(
      (await user.request("PATCH", "/api/v1/servers/pool-a/warm-pool", { sizes: { minimal: 1 } })).status,
    ).toBe(403);
    const bad = async (body: unknown) =>
      (await admin.request("PATCH", "/api/v1/servers/pool-a/warm-pool", body)).status;
    expect(await bad({ sizes: { "no-such-template": 1 } })).toBe(400);
    expect(await bad({ sizes: { minimal: -1 } })).toBe(400);
    expect(await bad({ sizes: { minimal: 1000 } })).toBe(400);
    expect(await bad({ sizes: { minimal: 1 }, extra: true })).toBe(400);
    expect(
      (await admin.request("PATCH", "/api/v1/servers/nowhere/warm-pool", { sizes: { minimal: 1 } })).status,
    ).toBe(404);
    // Nothing changed by the refused requests.
    expect((await admin.get("/api/v1/servers/pool-a")).body.warmPool[0].size).toBe(3);
  });

  it("places a create on the host whose pool has a ready clone of the template", async () => {
    await setup();
    await hostA.post(
      "/agent/v1/heartbeat",
      heartbeat({ minimal: "ready" }, { pool: [pool("minimal", 3, 0, 3)] }),
    );
    await hostB.post(
      "/agent/v1/heartbeat",
      heartbeat({ minimal: "ready" }, { pool: [pool("minimal", 1, 1, 0)] }),
    );
    const first = await admin.post("/api/v1/boxes", { template: "minimal", name: "pooled-one" });
    expect(first.status).toBe(202);
    expect(first.body.box.server).toBe("pool-b");
    // Its pool is drained now and A's is ready: the next create goes to A.
    await hostB.post(
      "/agent/v1/heartbeat",
      heartbeat({ minimal: "ready" }, { pool: [pool("minimal", 1, 0, 1)] }),
    );
    await hostA.post(
      "/agent/v1/heartbeat",
      heartbeat({ minimal: "ready" }, { pool: [pool("minimal", 3, 2, 1)] }),
    );
    const second = await admin.post("/api/v1/boxes", { template: "minimal", name: "pooled-two" });
    expect(second.body.box.server).toBe("pool-a");
  });

  it("counts a host's pool clones against its capacity at the size its agent reports", async () => {
    await setup();
    // Only pool-c takes boxes here.
    for (const name of ["pool-a", "pool-b"])
      expect((await admin.post(`/api/v1/servers/${name}/actions`, { action: "drain" })).status).toBe(200);
    const capacity = { vcpu: 16, memoryMb: 65536, diskGb: 100 };
    const hostC = await registerServer(admin, "pool-c", { capacity });
    const report = (p: Record<string, unknown>) =>
      hostC.post(
        "/agent/v1/heartbeat",
        heartbeat({ minimal: "ready" }, { capacity, pool: [{ ...pool("code", 0, 0, 0), ...p }] }),
      );
    const create = (name: string) => admin.post("/api/v1/boxes", { template: "minimal", name });

    // Four `code` clones with 20 GB volumes hold 80 of 100 GB: a 10 GB box still fits.
    await report({ target: 4, ready: 4, diskGb: 20, memoryMb: 1536 });
    const fits = await create("beside-pool");
    expect(fits.status).toBe(202);
    expect(fits.body.box.server).toBe("pool-c");
    // One more clone (filling) and 90 + 10 GB leave no room for another 10 GB box.
    await report({ target: 5, ready: 4, filling: 1, diskGb: 20, memoryMb: 1536 });
    // The server view shows the same: the box beside what the pool holds.
    const view = (await admin.get("/api/v1/servers/pool-c")).body;
    expect(view.used.diskGb).toBe(10);
    expect(view.reserved).toEqual({ vcpu: 0, memoryMb: 5 * 1536, diskGb: 100 });
    const full = await create("no-room");
    expect(full.status).toBe(503);
    expect(full.body.error.details.reasons).toContain("pool-c: not enough diskGb");
    // An agent that does not report the clone size: the template's catalog size (medium, 20 GB) counts.
    await report({ target: 5, ready: 5 });
    expect((await create("no-room")).status).toBe(503);
    // Smaller clones (an agent configured so) leave room again.
    await report({ target: 5, ready: 5, diskGb: 2, memoryMb: 1536 });
    expect((await create("room-again")).status).toBe(202);

    for (const name of ["pool-a", "pool-b"])
      await admin.post(`/api/v1/servers/${name}/actions`, { action: "activate" });
  });
});
