import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { findCaddy } from "../support/caddy.ts";
import { closed, echo, edgeRequest, openWs, seen } from "./fixtures.ts";
import { cookieFrom, DOMAIN, type Edge, forHost, startEdge } from "./harness.ts";

const hasCaddy = findCaddy() !== null;
if (!hasCaddy)
  console.warn("SKIPPING edge/Caddy tests: `caddy` (2.6.2, apt-get install caddy) is not on PATH");

const site = (slug: string) => `${slug}.site.${DOMAIN}`;
const code = (slug: string) => `${slug}.code.${DOMAIN}`;

describe.skipIf(!hasCaddy)("edge through a real Caddy 2.6.2", () => {
  let e: Edge;
  let alphaCookie: string;

  const req = (host: string, path: string, opts?: Parameters<typeof edgeRequest>[3]) =>
    edgeRequest(e.edge, host, path, opts);

  const signIn = async (host: string) => {
    const token = e.handoff(forHost(host));
    const res = await req(host, `/__doppio/auth?token=${token}&next=${encodeURIComponent("/after?x=1")}`);
    expect(res.status).toBe(302);
    expect(res.headers.location).toBe("/after?x=1");
    return cookieFrom(res.headers["set-cookie"]);
  };

  beforeAll(async () => {
    e = await startEdge();
    e.box("alpha");
    e.box("sleepy", { state: "stopped" });
    e.box("hidden", { sitePublic: false });
    expect(await e.keeper.ensureConfig()).toBe("loaded");
    alphaCookie = await signIn(code("alpha"));
  });

  afterAll(async () => {
    await e?.close();
  });

  it("loads the static config once and leaves it alone afterwards", async () => {
    expect(await e.keeper.ensureConfig()).toBe("unchanged");
  });

  it("site → guest :8000, gzip on, POST body intact, client X-Doppio-Upstream ignored", async () => {
    const res = await req(site("alpha"), "/app?q=1", {
      method: "POST",
      body: "hello body",
      headers: {
        "accept-encoding": "gzip",
        "content-type": "text/plain",
        "x-doppio-upstream": e.guests.find((g) => g.role === "code")!.address,
      },
    });
    expect(res.headers["content-encoding"]).toBe("gzip");
    const s = seen(res);
    expect(s).toMatchObject({ role: "site", method: "POST", url: "/app?q=1", body: "hello body" });
    expect(s.headers.host).toBe(site("alpha"));
    expect(s.headers["x-doppio-upstream"]).toBeUndefined();
  });

  it("a large upload reaches the guest whole (the auth sub-request does not eat the body)", async () => {
    const body = "0123456789abcdef".repeat(256 * 1024); // 4 MiB
    const s = seen(await req(site("alpha"), "/upload", { method: "PUT", body }));
    expect(s.body.length).toBe(body.length);
    expect(s.body === body).toBe(true);
  });

  it("/socket.io/* → guest :9000 with the Frappe site headers", async () => {
    const s = seen(await req(site("alpha"), "/socket.io/?EIO=4&transport=polling"));
    expect(s.role).toBe("socketio");
    expect(s.headers["x-frappe-site-name"]).toBe(site("alpha"));
    expect(s.headers.host).toBe(site("alpha"));
    expect(s.headers.origin).toBe(`http://${site("alpha")}`);
  });

  it("code → guest :8888 for the owner; the access cookie never reaches the guest", async () => {
    const s = seen(await req(code("alpha"), "/", { headers: { cookie: `theme=dark; ${alphaCookie}` } }));
    expect(s.role).toBe("code");
    expect(s.headers.cookie).toBe("theme=dark");
  });

  it("dev port → guest {port} with Host rewritten to localhost; unexposed port → 502 page", async () => {
    const devCookie = await signIn(`5173-alpha.code.${DOMAIN}`);
    const s = seen(
      await req(`5173-alpha.code.${DOMAIN}`, "/src/main.ts", { headers: { cookie: devCookie } }),
    );
    expect(s).toMatchObject({ role: "dev", url: "/src/main.ts" });
    expect(s.headers.host).toBe("localhost");
    const closedCookie = await signIn(`3000-alpha.code.${DOMAIN}`);
    const closedPort = await req(`3000-alpha.code.${DOMAIN}`, "/", { headers: { cookie: closedCookie } });
    expect(closedPort.status).toBe(502);
    expect(closedPort.body).toContain("Port not reachable");
  });

  it("unknown host → 404 'no such box'; stopped box → 503 'stopped' page", async () => {
    for (const host of [site("nobody"), code("nobody"), "example.com", `a.b.site.${DOMAIN}`]) {
      const res = await req(host, "/");
      expect(res.status, host).toBe(404);
      expect(res.body).toContain("No such box");
    }
    const res = await req(site("sleepy"), "/");
    expect(res.status).toBe(503);
    expect(res.headers["content-type"]).toContain("text/html");
    expect(res.body).toContain("This box is stopped");
  });

  it("a spoofed X-Forwarded-Host cannot borrow another box's route", async () => {
    const res = await req(site("nobody"), "/", { headers: { "x-forwarded-host": site("alpha") } });
    expect(res.status).toBe(404);
  });

  it("private URLs: no cookie → 401 (or 302 to sign-in for a browser page load)", async () => {
    const res = await req(code("alpha"), "/");
    expect(res.status).toBe(401);
    expect(res.body).toContain("Sign-in required");
    const page = await req(code("alpha"), "/x?y=1", { headers: { accept: "text/html" } });
    expect(page.status).toBe(302);
    expect(page.headers.location).toBe(
      `https://control.test/open/alpha?next=${encodeURIComponent("/x?y=1")}`,
    );
    // Private site: public for alpha, owner-only for hidden.
    expect((await req(site("hidden"), "/")).status).toBe(401);
    const siteCookie = await signIn(site("hidden"));
    expect(seen(await req(site("hidden"), "/", { headers: { cookie: siteCookie } })).role).toBe("site");
    // A cookie is bound to its box and audience.
    expect((await req(code("hidden"), "/", { headers: { cookie: alphaCookie } })).status).toBe(401);
    expect((await req(code("hidden"), "/", { headers: { cookie: siteCookie } })).status).toBe(401);
  });

  it("refuses hand-off tokens for another user, another slug, another audience, expired or reused", async () => {
    const alpha = forHost(code("alpha"));
    const cases = [
      e.handoff({ ...alpha, usr: "user-2" }),
      e.handoff({ ...alpha, sub: "hidden" }),
      e.handoff({ ...alpha, aud: "site" }),
      e.handoff({ ...alpha, hst: "dev:5173" }),
      e.handoff(alpha, -1),
      "not-a-token",
    ];
    for (const token of cases) {
      const res = await req(code("alpha"), `/__doppio/auth?token=${token}&next=/`);
      expect(res.status, token).toBe(401);
      expect(res.headers["set-cookie"]).toBeUndefined();
    }
    const once = e.handoff(alpha);
    expect((await req(code("alpha"), `/__doppio/auth?token=${once}`)).status).toBe(302);
    const again = await req(code("alpha"), `/__doppio/auth?token=${once}`);
    expect(again.status).toBe(401);
    expect(again.body).toContain("already_used");
  });

  it("hand-off cookies expire after 12 h (agent clock)", async () => {
    const cookie = await signIn(code("alpha"));
    e.clock.now += 12 * 3600_000 + 1_000;
    try {
      expect((await req(code("alpha"), "/", { headers: { cookie } })).status).toBe(401);
    } finally {
      e.clock.now -= 12 * 3600_000 + 1_000;
    }
  });

  it("next= only redirects within the same host", async () => {
    for (const next of [
      "//evil.com/x",
      "https://evil.com/",
      "/\\evil.com",
      "evil.com",
      "/%0d%0aLocation:x",
    ]) {
      const token = e.handoff(forHost(code("alpha")));
      const res = await req(code("alpha"), `/__doppio/auth?token=${token}&next=${encodeURIComponent(next)}`);
      expect(res.status).toBe(302);
      const loc = String(res.headers.location);
      expect(loc.startsWith("/") && !loc.startsWith("//") && !loc.includes("\\"), `${next} → ${loc}`).toBe(
        true,
      );
      expect(new URL(loc, "https://alpha.code.doppio.test").host).toBe("alpha.code.doppio.test");
    }
  });

  it("an open WebSocket to box A survives creating and deleting box B", async () => {
    const ws = await openWs(e.edge, code("alpha"), { cookie: alphaCookie });
    try {
      let closedEarly = false;
      ws.once("close", () => {
        closedEarly = true;
      });
      expect(await echo(ws, "one")).toBe(`code:${code("alpha")}:one`);

      e.box("bravo");
      expect(seen(await req(site("bravo"), "/")).role).toBe("site");
      e.routes.delete("bravo");
      expect((await req(site("bravo"), "/")).status).toBe(404);
      expect(await e.keeper.ensureConfig()).toBe("unchanged");
      // Even a forced re-load of the identical config is a no-op for Caddy.
      await e.caddy.admin.load(e.desiredConfig);

      expect(await echo(ws, "two")).toBe(`code:${code("alpha")}:two`);
      expect(closedEarly).toBe(false);
    } finally {
      ws.close();
    }
  });

  it("code WebSockets reach the guest with no compression offered; site WebSockets keep it", async () => {
    const codeWs = await openWs(e.edge, code("alpha"), { cookie: alphaCookie });
    const siteWs = await openWs(e.edge, site("alpha"));
    try {
      expect(await echo(codeWs, "plain")).toBe(`code:${code("alpha")}:plain`);
      expect(codeWs.extensions).toBe("");
      expect(await echo(siteWs, "packed")).toBe(`site:${site("alpha")}:packed`);
      expect(siteWs.extensions).toContain("permessage-deflate");
    } finally {
      codeWs.close();
      siteWs.close();
    }
  });

  // Control: proves the survival test above can fail, and documents why the design exists.
  it("control: ANY raw Caddy config change closes the same WebSocket (Caddy 2.6.2)", async () => {
    const ws = await openWs(e.edge, code("alpha"), { cookie: alphaCookie });
    expect(await echo(ws, "before")).toBe(`code:${code("alpha")}:before`);
    const unrelated = {
      match: [{ host: ["unrelated.example"] }],
      handle: [{ handler: "static_response", body: "x" }],
    };
    const res = await e.caddy.adminRequest("POST", "/config/apps/http/servers/doppio/routes", unrelated);
    expect(res.status).toBe(200);
    await closed(ws, 10_000);
    // The keeper notices the drift and puts the static config back.
    expect(await e.keeper.ensureConfig()).toBe("loaded");
    expect(await e.keeper.ensureConfig()).toBe("unchanged");
  });

  it("Caddy SIGKILLed and restarted empty: ensureConfig() restores routing", async () => {
    await e.caddy.stop("SIGKILL");
    await e.caddy.start();
    const running = JSON.parse((await e.caddy.adminRequest("GET", "/config/")).text) as { apps?: unknown };
    expect(running.apps).toBeUndefined();
    await expect(req(site("alpha"), "/")).rejects.toThrow(/ECONNREFUSED/);
    expect(await e.keeper.ensureConfig()).toBe("loaded");
    expect(seen(await req(site("alpha"), "/")).role).toBe("site");
    const ws = await openWs(e.edge, code("alpha"), { cookie: alphaCookie });
    expect(await echo(ws, "back")).toBe(`code:${code("alpha")}:back`);
    ws.close();
  });

  it("the keeper's watch loop repairs a restarted Caddy on its own", async () => {
    await e.caddy.stop("SIGKILL");
    await e.caddy.start();
    e.keeper.watch(100);
    try {
      const deadline = Date.now() + 10_000;
      let status = 0;
      while (status !== 200 && Date.now() < deadline) {
        status = await req(site("alpha"), "/").then(
          (r) => r.status,
          () => 0,
        );
        if (status !== 200) await new Promise((r) => setTimeout(r, 100));
      }
      expect(status).toBe(200);
    } finally {
      e.keeper.stop();
    }
  });

  it("/tls/ask allows only hostnames of boxes on this host", async () => {
    const ask = (q: string) => fetch(`http://${e.agentDial}/tls/ask${q}`).then((r) => r.status);
    for (const d of [
      site("alpha"),
      code("alpha"),
      `8081-alpha.code.${DOMAIN}`,
      site("sleepy"),
      code("hidden"),
    ]) {
      expect(await ask(`?domain=${d}`), d).toBe(200);
    }
    for (const d of [
      site("nobody"),
      `8081-nobody.code.${DOMAIN}`,
      "alpha.site.other.test",
      "example.com",
      DOMAIN,
    ]) {
      expect(await ask(`?domain=${d}`), d).toBe(404);
    }
    for (const q of ["", "?domain=", "?domain=a%20b", "?domain=..", `?domain=${"a".repeat(300)}`]) {
      expect(await ask(q), q).toBe(400);
    }
  });
});
