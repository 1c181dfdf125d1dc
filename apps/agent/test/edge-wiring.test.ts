import { mint } from "@doppio/access-token";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  freePort,
  startAgent,
  startCp,
  type TestAgent,
  type TestCp,
  waitFor,
  waitForBox,
  waitForHeartbeat,
} from "./support/agent-harness.ts";

/**
 * The edge helper's plugin mounted in the agent API the way main.ts does it: Caddy's loopback
 * routes without a bearer, everything else still behind it; the access key arrives with the
 * heartbeat. (Caddy itself is exercised in test/edge; its admin URL here points nowhere.)
 */
describe("edge wiring in the agent API", () => {
  let cp: TestCp;
  let a: TestAgent;
  let base: string;
  const DOMAIN = "host-1.example.test";
  const check = (host: string, uri = "/", headers: Record<string, string> = {}) =>
    fetch(`${base}/edge/check`, {
      redirect: "manual",
      headers: { "x-forwarded-host": host, "x-forwarded-uri": uri, "x-forwarded-method": "GET", ...headers },
    });

  beforeAll(async () => {
    cp = await startCp();
    a = await startAgent({
      cpUrl: cp.url,
      token: cp.agentToken,
      listen: true,
      edge: true,
      config: {
        caddyAdminUrl: `http://127.0.0.1:${await freePort()}`,
        edge: {
          tls: { mode: "http", listen: "127.0.0.1:0" },
          signInUrl: `${cp.url}/api/v1/access/open`,
        },
      },
    });
    base = a.apiUrl!;
    await waitForHeartbeat(cp);
  });
  afterAll(async () => {
    await a?.close();
    await cp?.close();
  });

  it("answers /tls/ask without a bearer, only for boxes on this host", async () => {
    const ask = (d: string) => fetch(`${base}/tls/ask?domain=${encodeURIComponent(d)}`);
    expect((await ask(`edgy.site.${DOMAIN}`)).status).toBe(404);
    await cp.admin.post("/api/v1/boxes", { template: "minimal", name: "edgy" });
    await waitForBox(cp, "edgy", "running");
    expect((await ask(`edgy.site.${DOMAIN}`)).status).toBe(200);
    expect((await ask(`8080-edgy.code.${DOMAIN}`)).status).toBe(200);
    expect((await ask(`other.site.${DOMAIN}`)).status).toBe(404);
    expect((await ask("edgy.site.elsewhere.test")).status).toBe(404);
    // The bearer scope is intact next to the edge routes.
    expect((await fetch(`${base}/vms`)).status).toBe(401);
  });

  it("routes the public site to the box's upstream and sends strangers to sign in for code", async () => {
    const site = await check(`edgy.site.${DOMAIN}`);
    expect(site.status).toBe(200);
    expect(site.headers.get("x-doppio-upstream")).toBe("10.0.0.2:8000");
    const socket = await check(`edgy.site.${DOMAIN}`, "/socket.io/?EIO=4");
    expect(socket.headers.get("x-doppio-upstream")).toBe("10.0.0.2:9000");

    const code = await check(`edgy.code.${DOMAIN}`, "/", { accept: "text/html" });
    expect(code.status).toBe(302);
    const location = new URL(code.headers.get("location")!);
    expect(`${location.origin}${location.pathname}`).toBe(`${cp.url}/api/v1/access/open`);
    expect(location.searchParams.get("host")).toBe(`edgy.code.${DOMAIN}`);
    expect(location.searchParams.get("next")).toBe("/");
  });

  it("accepts a hand-off token signed by the control plane's key from the heartbeat", async () => {
    const owner = a.agent.boxes.get("edgy")!.spec.owner;
    const token = mint(
      cp.env.cp.ctx.access.privateKey,
      { sub: "edgy", usr: owner, aud: "code" },
      60,
      Date.now(),
    );
    const res = await waitFor("the key from a heartbeat", async () => {
      const r = await check(
        `edgy.code.${DOMAIN}`,
        `/__doppio/auth?token=${encodeURIComponent(token)}&next=/`,
      );
      return r.status === 302 ? r : null;
    });
    expect(res.headers.get("set-cookie")).toMatch(/^doppio_access=/);
    const cookie = res.headers.get("set-cookie")!.split(";")[0]!;
    const pass = await check(`edgy.code.${DOMAIN}`, "/", { cookie });
    expect(pass.status).toBe(200);
    expect(pass.headers.get("x-doppio-upstream")).toBe("10.0.0.2:8888");

    // A token signed by any other key is refused.
    const { generateEd25519 } = await import("@doppio/access-token");
    const forged = mint(
      generateEd25519().privateKey,
      { sub: "edgy", usr: owner, aud: "code" },
      60,
      Date.now(),
    );
    const bad = await check(
      `edgy.code.${DOMAIN}`,
      `/__doppio/auth?token=${encodeURIComponent(forged)}&next=/`,
    );
    expect(bad.status).not.toBe(302);
    expect(bad.headers.get("set-cookie")).toBeNull();
  });
});
