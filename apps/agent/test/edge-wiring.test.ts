import { generateEd25519, sign } from "@doppio/access-token";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort } from "../../api/test/support/ports.ts";
import {
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
      config: {
        caddyAdmin: `http://127.0.0.1:${await freePort()}`,
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

  /** The hand-off URL the control plane sends the signed-in owner to. */
  const handoff = async (host: string) => {
    const res = await cp.admin.get(`/api/v1/access/open?${new URLSearchParams({ host, next: "/" })}`);
    expect(res.status).toBe(302);
    const url = new URL(res.headers.get("location")!);
    expect(url.host).toBe(host);
    return `${url.pathname}${url.search}`;
  };
  let cookie: string;

  it("accepts the control plane's hand-off (verified with the key from the heartbeat)", async () => {
    const uri = await handoff(`edgy.code.${DOMAIN}`);
    const res = await waitFor("the key from a heartbeat", async () => {
      const r = await check(`edgy.code.${DOMAIN}`, uri);
      return r.status === 302 ? r : null;
    });
    expect(res.headers.get("set-cookie")).toMatch(/^doppio_access=/);
    cookie = res.headers.get("set-cookie")!.split(";")[0]!;
    const pass = await check(`edgy.code.${DOMAIN}`, "/", { cookie });
    expect(pass.status).toBe(200);
    expect(pass.headers.get("x-doppio-upstream")).toBe("10.0.0.2:8888");

    // The same claims signed by any other key are refused.
    const token = new URLSearchParams(uri.slice(uri.indexOf("?") + 1)).get("token")!;
    const claims = JSON.parse(Buffer.from(token.split(".")[0]!, "base64url").toString("utf8"));
    const forged = sign(generateEd25519().privateKey, { ...claims, jti: "another-id" });
    const bad = await check(
      `edgy.code.${DOMAIN}`,
      `/__doppio/auth?token=${encodeURIComponent(forged)}&next=/`,
    );
    expect(bad.status).not.toBe(302);
    expect(bad.headers.get("set-cookie")).toBeNull();
  });

  it("use seen by the edge reaches the control plane; a hibernated box wakes for its owner only", async () => {
    expect((await cp.admin.request("PATCH", "/api/v1/me/idle", { idleTimeoutMinutes: 30 })).status).toBe(200);
    const before = Date.parse((await cp.admin.get("/api/v1/boxes/edgy")).body.idleHibernatesAt);
    await new Promise((r) => setTimeout(r, 50));
    const used = Date.now();
    expect((await check(`edgy.code.${DOMAIN}`, "/", { cookie })).status).toBe(200);
    // The agent's next heartbeat carries it; the deadline moves to 30 min after that request.
    await waitFor("the request's time at the control plane", async () => {
      const at = Date.parse((await cp.admin.get("/api/v1/boxes/edgy")).body.idleHibernatesAt);
      return at > before && at >= used + 30 * 60_000 ? at : null;
    });

    expect((await cp.admin.post("/api/v1/boxes/edgy/hibernate")).status).toBe(202);
    await waitForBox(cp, "edgy", "hibernated");
    // A stranger's request wakes nothing (sign-in first, as for any private URL).
    expect((await check(`edgy.code.${DOMAIN}`, "/")).status).toBe(401);
    expect((await check(`edgy.code.${DOMAIN}`, "/", { accept: "text/html" })).status).toBe(302);
    await new Promise((r) => setTimeout(r, 300));
    expect((await cp.admin.get("/api/v1/boxes/edgy")).body.status).toBe("hibernated");

    const waking = await check(`edgy.code.${DOMAIN}`, "/", { cookie, accept: "text/html" });
    expect(waking.status).toBe(503);
    expect(waking.headers.get("retry-after")).toBe("2");
    expect(await waking.text()).toContain("Waking up");
    await waitForBox(cp, "edgy", "running");
    const jobs = (await cp.admin.get("/api/v1/boxes/edgy/jobs")).body.jobs;
    expect(jobs[0]).toMatchObject({ action: "start", status: "succeeded" });
    const pass = await waitFor("routes back", async () => {
      const r = await check(`edgy.code.${DOMAIN}`, "/", { cookie });
      return r.status === 200 ? r : null;
    });
    expect(pass.headers.get("x-doppio-upstream")).toBe("10.0.0.2:8888");
    await cp.admin.request("PATCH", "/api/v1/me/idle", { idleTimeoutMinutes: null });
  });

  it("letting anyone wake the public site reaches the hibernated box's host with a heartbeat, not a job", async () => {
    expect((await cp.admin.post("/api/v1/boxes/edgy/hibernate")).status).toBe(202);
    await waitForBox(cp, "edgy", "hibernated");
    const jobsBefore = (await cp.admin.get("/api/v1/boxes/edgy/jobs")).body.jobs.length;
    const stranger = () => check(`edgy.site.${DOMAIN}`, "/", { accept: "text/html" });
    expect(await (await stranger()).text()).not.toContain("Waking up");

    const patch = { idleTimeoutMinutes: null, publicWake: true };
    expect((await cp.admin.request("PATCH", "/api/v1/boxes/edgy/idle", patch)).status).toBe(200);
    expect((await cp.admin.get("/api/v1/boxes/edgy/jobs")).body.jobs).toHaveLength(jobsBefore);
    await waitFor("the setting at the edge", async () =>
      (await (await stranger()).text()).includes("Waking up"),
    );
    // As the waking page does: it reloads until the box serves (a wake is sent at most once per 10 s).
    await waitFor(
      "the stranger's visit to wake the box",
      async () => (await stranger()).headers.get("x-doppio-upstream") !== null,
      30_000,
      500,
    );
    const jobs = (await cp.admin.get("/api/v1/boxes/edgy/jobs")).body.jobs;
    expect(jobs).toHaveLength(jobsBefore + 1);
    expect(jobs[0]).toMatchObject({ action: "start", status: "succeeded" });
  });

  // Last: it signs the owner's session out.
  it("signing out of the control plane ends the box-access cookie at the edge", async () => {
    const pending = await handoff(`edgy.code.${DOMAIN}`);
    expect((await cp.admin.post("/api/v1/auth/logout")).status).toBe(204);
    // The agent hears of it with its next heartbeat (every 500 ms here).
    const refused = await waitFor("the sign-out to reach the edge", async () => {
      const r = await check(`edgy.code.${DOMAIN}`, "/", { cookie });
      return r.status !== 200 ? r : null;
    });
    expect(refused.status).toBe(401);
    const late = await check(`edgy.code.${DOMAIN}`, pending);
    expect(late.status).toBe(401);
    expect(await late.text()).toContain("signed_out");
    expect(late.headers.get("set-cookie")).toBeNull();
  });
});
