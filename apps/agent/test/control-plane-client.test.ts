import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { AGENT_MAX_IN_FLIGHT, type Heartbeat } from "@doppio/contracts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { heartbeat } from "../../api/test/support/client.ts";
import { type GitCredentialAnswer, HttpControlPlane, retryAfterMs } from "../src/control-plane.ts";
import { startCp, type TestCp } from "./support/agent-harness.ts";

const CREDENTIAL = {
  username: "x-access-token",
  token: "ghs_client-test-token",
  expiresAt: "2030-01-01T00:00:00.000Z",
};

/**
 * The agent's client of the control plane: it keeps a host's requests within what a replica
 * takes from one host at once (AGENT_MAX_IN_FLIGHT beside the claim long-poll), so a
 * well-behaved agent is never refused however many requests its loops and its boxes start;
 * and a refusal's Retry-After reaches the loops that wait on it.
 */
describe("the agent's control-plane client", () => {
  let cp: TestCp;

  beforeAll(async () => {
    cp = await startCp("client-host");
  });
  afterAll(async () => {
    await cp?.close();
  });

  it("holds its requests over the replica's limit in its own queue, so none is refused; boxes' asks never take its own connections", async () => {
    const http = new HttpControlPlane(cp.url, cp.agentToken, 30_000);
    let release = () => {};
    try {
      await http.heartbeat(heartbeat() as unknown as Heartbeat);
      expect((await cp.admin.post("/api/v1/boxes", { template: "minimal", name: "manyasks" })).status).toBe(
        202,
      );
      let held = 0;
      const gate = new Promise<void>((resolve) => (release = resolve));
      cp.env.cp.ctx.gitCredentials = {
        async issue() {
          held++;
          await gate;
          return CREDENTIAL;
        },
      };
      // The claim long-poll first, then three times the limit of credential requests at once
      // (a box's Git asks through the metadata service whenever its user pushes, or in a loop).
      const claim = http.claim(1, 3_000);
      const asks: Promise<GitCredentialAnswer>[] = Array.from({ length: 3 * AGENT_MAX_IN_FLIGHT }, () =>
        http.gitCredential("manyasks"),
      );
      await expect.poll(() => held, { timeout: 10_000 }).toBeGreaterThan(0);
      // While every box-asked connection waits, the agent's own requests go through ...
      const own = Array.from({ length: AGENT_MAX_IN_FLIGHT }, () =>
        http.heartbeat(heartbeat() as unknown as Heartbeat),
      );
      expect(await Promise.all(own)).toHaveLength(AGENT_MAX_IN_FLIGHT);
      // ... and the boxes' asks hold only their share of the host's limit.
      expect(held).toBeGreaterThan(0);
      expect(held).toBeLessThan(AGENT_MAX_IN_FLIGHT);
      release();
      expect(await Promise.all(asks)).toEqual(
        Array(3 * AGENT_MAX_IN_FLIGHT).fill({ credential: CREDENTIAL }),
      );
      expect((await claim).jobs).toHaveLength(1);
      const metrics = await (await fetch(`${cp.url}/metrics`)).text();
      expect(metrics).not.toMatch(/doppio_agent_requests_refused_total\{/);
    } finally {
      release();
      http.close();
    }
  });

  describe("against a control plane that refuses", () => {
    let server: Server;
    let url = "";
    beforeAll(async () => {
      server = createServer((_req, res) => {
        res.writeHead(429, { "content-type": "application/json", "retry-after": "3" });
        res.end(JSON.stringify({ error: { code: "rate_limited", message: "busy" } }));
      });
      await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
      url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    });
    afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

    it("reports the Retry-After it was given", async () => {
      const http = new HttpControlPlane(url, "dpa_token", 5_000);
      try {
        const err = await http.heartbeat(heartbeat() as unknown as Heartbeat).catch((e: unknown) => e);
        expect(retryAfterMs(err)).toBe(3_000);
      } finally {
        http.close();
      }
    });
  });
});
