import { request } from "node:http";
import { AGENT_MAX_IN_FLIGHT } from "@doppio/contracts";
import { eq } from "drizzle-orm";
import { afterEach, expect, it } from "vitest";
import { servers } from "../src/db/schema.ts";
import { type GitCredentialSource, noGitCredentials } from "../src/services/git-credentials.ts";
import { heartbeat, registerServer, signedInClient, type TestClient } from "./support/client.ts";
import { describeOnEachDb } from "./support/each-db.ts";

const CREDENTIAL = {
  username: "x-access-token",
  token: "ghs_in-flight-test-token",
  expiresAt: "2030-01-01T00:00:00.000Z",
};

/**
 * A host (a stolen agent token, a broken agent) that sends requests faster than they end:
 * this replica handles at most AGENT_MAX_IN_FLIGHT of them at once and refuses the rest at
 * once with 429 and Retry-After; the host's claim long-poll, other hosts and users go on.
 */
describeOnEachDb("a host's agent requests in progress", (env) => {
  let flooder: TestClient;
  let other: TestClient;
  let owner: TestClient;
  let release = () => {};

  async function setup() {
    if (flooder) return;
    const admin = await env().admin();
    flooder = await registerServer(admin, "flood-host");
    // Too small for any box: every box lands on the flooding host.
    other = await registerServer(admin, "quiet-host", { capacity: { vcpu: 1, memoryMb: 1024, diskGb: 1 } });
    owner = await signedInClient(env().url, "flood-owner");
    await flooder.post("/agent/v1/heartbeat", heartbeat());
    await other.post("/agent/v1/heartbeat", heartbeat());
    expect((await owner.post("/api/v1/boxes", { template: "minimal", name: "slowcred" })).status).toBe(202);
  }

  afterEach(() => {
    release();
    env().cp.ctx.gitCredentials = noGitCredentials;
  });

  /** Holds every credential asked for until `release()`; returns how many are held so far. */
  function holdCredentials(): () => number {
    let held = 0;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const holding: GitCredentialSource = {
      async issue() {
        held++;
        await gate;
        return CREDENTIAL;
      },
    };
    env().cp.ctx.gitCredentials = holding;
    return () => held;
  }

  async function flooderId(): Promise<string> {
    const [row] = await env().cp.ctx.db.select().from(servers).where(eq(servers.name, "flood-host"));
    return row!.id;
  }

  it("refuses the host's requests over the limit at once, and only while it holds the limit", async () => {
    await setup();
    const ctx = env().cp.ctx;
    const held = holdCredentials();
    const serverId = await flooderId();

    const slow = Array.from({ length: AGENT_MAX_IN_FLIGHT }, () =>
      flooder.post("/agent/v1/boxes/slowcred/git-credential", {}),
    );
    await expect.poll(held, { timeout: 10_000 }).toBe(AGENT_MAX_IN_FLIGHT);
    expect(ctx.agentInFlight.count(serverId)).toBe(AGENT_MAX_IN_FLIGHT);

    // One more of any kind is refused at once, with when to come back.
    const refused = await flooder.post("/agent/v1/heartbeat", heartbeat());
    expect(refused.status).toBe(429);
    expect(refused.body.error.code).toBe("rate_limited");
    expect(refused.headers.get("retry-after")).toBe("1");
    const events = await flooder.post("/agent/v1/jobs/no-such-job/events", { events: [] });
    expect(events.status).toBe(429);
    expect(held()).toBe(AGENT_MAX_IN_FLIGHT);

    // Its claim long-poll is not counted (one claim seat per host holds those) ...
    const claim = await flooder.post("/agent/v1/jobs/claim", { max: 1, waitMs: 0 });
    expect(claim.status).toBe(200);
    // ... another host and a user are served beside it.
    expect((await other.post("/agent/v1/heartbeat", heartbeat())).status).toBe(200);
    expect((await owner.get("/api/v1/boxes")).status).toBe(200);

    // Once its requests end, the host is served again: nothing of it stayed counted.
    release();
    for (const res of await Promise.all(slow)) expect(res.status).toBe(200);
    await expect.poll(() => ctx.agentInFlight.count(serverId)).toBe(0);
    expect((await flooder.post("/agent/v1/heartbeat", heartbeat())).status).toBe(200);
    const metrics = await (await fetch(`${env().url}/metrics`)).text();
    expect(metrics).toMatch(/doppio_agent_requests_refused_total\{server="flood-host"\} 2/);
  });

  it("counts a request whose host hung up as ended", async () => {
    await setup();
    const ctx = env().cp.ctx;
    const held = holdCredentials();
    const serverId = await flooderId();
    // Requests whose connections the host then drops.
    const url = new URL("/agent/v1/boxes/slowcred/git-credential", env().url);
    const sent = Array.from({ length: AGENT_MAX_IN_FLIGHT }, () => {
      const req = request(url, {
        method: "POST",
        headers: { authorization: `Bearer ${flooder.bearerToken}`, "content-type": "application/json" },
      });
      req.on("error", () => {});
      req.end("{}");
      return req;
    });
    await expect.poll(held, { timeout: 10_000 }).toBe(AGENT_MAX_IN_FLIGHT);
    for (const req of sent) req.destroy();
    // The handlers still wait for their credentials, but their connections are gone.
    await expect.poll(() => ctx.agentInFlight.count(serverId), { timeout: 5_000 }).toBe(0);
    expect((await flooder.post("/agent/v1/heartbeat", heartbeat())).status).toBe(200);
  });
});
