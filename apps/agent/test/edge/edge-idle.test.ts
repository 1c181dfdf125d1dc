import { setTimeout as delay } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { establishedPeers, touchConnected } from "../../src/edge/activity.ts";
import { findCaddy } from "../support/caddy.ts";
import { echo, edgeRequest, FakeGuest, openWs, seen } from "./fixtures.ts";
import { cookieFrom, DOMAIN, type Edge, forHost, startEdge } from "./harness.ts";

const hasCaddy = findCaddy() !== null;
if (!hasCaddy)
  console.warn("SKIPPING edge idle/wake tests: `caddy` (2.6.2, apt-get install caddy) is not on PATH");

const site = (slug: string) => `${slug}.site.${DOMAIN}`;
const code = (slug: string) => `${slug}.code.${DOMAIN}`;

// What the edge learns about a box's use (requests, open WebSockets) and who may wake a
// hibernated box, through a real Caddy 2.6.2 with the agent's static config.
describe.skipIf(!hasCaddy)("edge: idle tracking and wake on request (real Caddy)", () => {
  let e: Edge;
  /** A guest of its own for the WebSocket box: no other test's connections reach it. */
  let wsGuest: FakeGuest;

  const req = (host: string, path: string, opts?: Parameters<typeof edgeRequest>[3]) =>
    edgeRequest(e.edge, host, path, opts);
  const signIn = async (host: string) => {
    const res = await req(host, `/__doppio/auth?token=${e.handoff(forHost(host))}`);
    expect(res.status).toBe(302);
    return cookieFrom(res.headers["set-cookie"]);
  };
  const sample = async (slug: string) =>
    touchConnected([slug], e.routes, await establishedPeers(null), e.activity).includes(slug);

  beforeAll(async () => {
    e = await startEdge();
    wsGuest = await FakeGuest.start("ws");
    e.box("used");
    e.box("socket", { upstream: (p) => (p === 8888 ? wsGuest.address : null) });
    e.box("dozing", { state: "hibernated", sitePublic: true, publicWake: false });
    e.box("open-doors", { state: "hibernated", sitePublic: true, publicWake: true });
    expect(await e.keeper.ensureConfig()).toBe("loaded");
  });
  afterAll(async () => {
    await wsGuest?.close();
    await e?.close();
  });

  it("a request the edge passes counts as use of its box; a refused one does not", async () => {
    expect(e.activity.lastActiveAt("used")).toBeNull();
    e.clock.now += 1_000;
    expect(seen(await req(site("used"), "/")).role).toBe("site");
    expect(e.activity.lastActiveAt("used")).toBe(e.clock.now);
    const before = e.clock.now;
    e.clock.now += 60_000;
    // A stranger's request to the private code host is refused: not use.
    expect((await req(code("used"), "/")).status).toBe(401);
    expect(e.activity.lastActiveAt("used")).toBe(before);
  });

  it("an open WebSocket keeps its box active with no requests; once closed it does not", async () => {
    const cookie = await signIn(code("socket"));
    const ws = await openWs(e.edge, code("socket"), { cookie });
    try {
      expect(await echo(ws, "hi")).toBe(`ws:${code("socket")}:hi`);
      const opened = e.activity.lastActiveAt("socket");
      expect(opened).not.toBeNull();
      // Time passes with no request at all: only the open connection says the box is used.
      e.clock.now += 10 * 60_000;
      expect(await sample("socket")).toBe(true);
      expect(e.activity.lastActiveAt("socket")).toBe(e.clock.now);
    } finally {
      ws.close();
    }
    const closedAt = e.clock.now;
    let stillOpen = true;
    for (let i = 0; i < 100 && stillOpen; i++) {
      await delay(50);
      stillOpen = (await establishedPeers(null)).has(wsGuest.address);
    }
    expect(stillOpen).toBe(false);
    e.clock.now += 10 * 60_000;
    expect(await sample("socket")).toBe(false);
    expect(e.activity.lastActiveAt("socket")).toBe(closedAt);
  });

  it("a stranger cannot wake a private URL of a hibernated box, and learns nothing", async () => {
    for (const host of [code("dozing"), `5173-dozing.code.${DOMAIN}`]) {
      const res = await req(host, "/");
      expect(res.status, host).toBe(401);
      expect(res.body).not.toContain("hibernat");
    }
    // A browser is sent to sign in instead.
    expect((await req(code("dozing"), "/", { headers: { accept: "text/html" } })).status).toBe(302);
    expect(e.wakes).toEqual([]);
  });

  it("a public site wakes for anyone only if its box allows it, else it shows 'hibernated'", async () => {
    const res = await req(site("dozing"), "/");
    expect(res.status).toBe(503);
    expect(res.body).toContain("This box is hibernated");
    expect(res.headers["retry-after"]).toBeUndefined();
    expect(e.wakes).toEqual([]);

    const api = await req(site("open-doors"), "/api/thing", { headers: { accept: "application/json" } });
    expect(api.status).toBe(503);
    expect(api.headers["retry-after"]).toBe("2");
    expect(JSON.parse(api.body)).toMatchObject({ error: { code: "waking" } });
    expect(e.wakes).toEqual(["open-doors"]);
  });

  it("the owner's request wakes it: browsers get a self-reloading page, API clients 503 + Retry-After", async () => {
    const cookie = await signIn(code("dozing"));
    const page = await req(code("dozing"), "/", { headers: { cookie, accept: "text/html" } });
    expect(page.status).toBe(503);
    expect(page.headers["retry-after"]).toBe("2");
    expect(page.headers["content-type"]).toContain("text/html");
    expect(page.body).toContain("Waking up");
    expect(page.body).toContain("location.reload()");
    const api = await req(code("dozing"), "/x", { headers: { cookie } });
    expect(api.status).toBe(503);
    expect(e.wakes.filter((s) => s === "dozing")).toHaveLength(2);
    // Once resumed, the same request goes through.
    e.box("dozing", { state: "running" });
    expect(seen(await req(code("dozing"), "/", { headers: { cookie } })).role).toBe("code");
  });
});
