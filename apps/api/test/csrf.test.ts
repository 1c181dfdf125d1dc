import { expect, it } from "vitest";
import { heartbeat, registerServer, signedInClient, type TestClient } from "./support/client.ts";
import { describeOnEachDb } from "./support/each-db.ts";

/**
 * A page on a box host (`{slug}.site.{domain}`) is the same site as the dashboard, so the
 * browser sends the session cookie with its requests to the control plane. These are the
 * requests such a page can make (forms, `no-cors` fetches, Origin of the box host); each
 * state change they aim at must be refused before it does anything.
 */
const BOX_ORIGIN = "http://victim-box.site.fc-csrf.example.test";

interface Forged {
  what: string;
  headers: Record<string, string>;
  body?: string;
}

const FORGED: Forged[] = [
  // <form enctype="text/plain"> from the box page: same-site, so the cookie goes along.
  { what: "text/plain form", headers: { "content-type": "text/plain", origin: BOX_ORIGIN }, body: "{}" },
  { what: "urlencoded form", headers: { "content-type": "application/x-www-form-urlencoded" }, body: "a=b" },
  { what: "no body at all", headers: { "sec-fetch-site": "same-site" } },
  {
    what: "JSON from the box's origin",
    headers: { "content-type": "application/json", origin: BOX_ORIGIN },
    body: "{}",
  },
  { what: "JSON, origin null", headers: { "content-type": "application/json", origin: "null" }, body: "{}" },
  {
    what: "JSON, no Origin, same-site",
    headers: { "content-type": "application/json", "sec-fetch-site": "same-site" },
    body: "{}",
  },
  { what: "JSON, neither header", headers: { "content-type": "application/json" }, body: "{}" },
];

describeOnEachDb("CSRF", (env) => {
  let user: TestClient;
  let admin: TestClient;
  let cookie: string;
  let adminCookie: string;

  /** A request as a browser would send it with the user's cookie, headers exactly as given. */
  const raw = (method: string, path: string, headers: Record<string, string>, body?: string) =>
    fetch(new URL(path, env().url), { method, headers, body });
  const sessionOf = (client: TestClient) => client.sessionCookie!;

  it("refuses every forged cookie-authenticated state change, and changes nothing", async () => {
    admin = await env().admin();
    user = await signedInClient(env().url, "csrf");
    cookie = sessionOf(user);
    adminCookie = sessionOf(admin);
    const agent = await registerServer(admin, "fc-csrf");
    await agent.post("/agent/v1/heartbeat", heartbeat());
    expect((await user.post("/api/v1/boxes", { template: "minimal", name: "victim-box" })).status).toBe(202);
    const token = (await user.post("/api/v1/tokens", { name: "kept" })).body;

    const targets: Array<[method: string, path: string, asAdmin?: boolean]> = [
      ["POST", "/api/v1/boxes"],
      ["PATCH", "/api/v1/boxes/victim-box"],
      ["POST", "/api/v1/boxes/victim-box/start"],
      ["POST", "/api/v1/boxes/victim-box/stop"],
      ["POST", "/api/v1/boxes/victim-box/reset"],
      ["DELETE", "/api/v1/boxes/victim-box"],
      ["POST", "/api/v1/tokens"],
      ["DELETE", `/api/v1/tokens/${token.id}`],
      ["POST", "/api/v1/auth/logout"],
      ["POST", "/api/v1/servers", true],
      ["POST", "/api/v1/servers/fc-csrf/token", true],
      ["POST", "/api/v1/servers/fc-csrf/golden", true],
      ["POST", "/api/v1/servers/fc-csrf/images", true],
    ];
    for (const [method, path, asAdmin] of targets) {
      for (const f of FORGED) {
        const res = await raw(method, path, { ...f.headers, cookie: asAdmin ? adminCookie : cookie }, f.body);
        const body = (await res.json()) as { error?: { code?: string } };
        expect([res.status, body.error?.code], `${method} ${path}: ${f.what}`).toEqual([403, "forbidden"]);
      }
    }
    // Nothing happened: same box state and env, same tokens, same agent token, still signed in.
    const box = (await user.get("/api/v1/boxes/victim-box")).body;
    expect([box.status, box.env]).toEqual(["creating", {}]);
    expect((await user.get("/api/v1/tokens")).body.tokens.map((t: any) => t.id)).toEqual([token.id]);
    expect((await user.get("/api/v1/boxes")).body.boxes).toHaveLength(1);
    expect((await agent.post("/agent/v1/heartbeat", heartbeat())).status).toBe(200);
    expect((await raw("GET", "/api/v1/me", { cookie })).status).toBe(200);
  });

  it("accepts the dashboard's own requests, same-origin fetches without Origin, and bearer tokens", async () => {
    const origin = new URL(env().url).origin;
    const json = { "content-type": "application/json" };
    const patch = (headers: Record<string, string>, value: string) =>
      raw(
        "PATCH",
        "/api/v1/boxes/victim-box",
        { ...json, ...headers },
        JSON.stringify({ env: { V: value } }),
      );
    expect((await patch({ cookie, origin }, "1")).status).toBe(200);
    expect((await patch({ cookie, "sec-fetch-site": "same-origin" }, "2")).status).toBe(200);
    const bearer = (await user.post("/api/v1/tokens", { name: "cli" })).body.token;
    expect((await patch({ authorization: `Bearer ${bearer}` }, "3")).status).toBe(200);
    // A cross-origin page's GET is harmless and still answered (it cannot read it without CORS).
    expect((await raw("GET", "/api/v1/boxes/victim-box", { cookie, origin: BOX_ORIGIN })).status).toBe(200);
    expect((await user.get("/api/v1/boxes/victim-box")).body.env).toEqual({ V: "3" });
    expect((await raw("POST", "/api/v1/auth/logout", { ...json, cookie, origin }, "{}")).status).toBe(204);
    expect((await raw("GET", "/api/v1/me", { cookie })).status).toBe(401);
  });
});
