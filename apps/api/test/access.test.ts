import type { KeyObject } from "node:crypto";
import { type AccessClaims, publicKeyFromPem, verify } from "@doppio/access-token";
import { eq } from "drizzle-orm";
import { beforeAll, expect, it } from "vitest";
import { sha256 } from "../src/auth/secrets.ts";
import { boxAccessGrants, servers } from "../src/db/schema.ts";
import { accessSessionId, endedBoxAccess } from "../src/services/access.ts";
import { reapTick } from "../src/services/periodic.ts";
import { heartbeat, PASSWORD, registerServer, signedInClient, TestClient } from "./support/client.ts";
import { describeOnEachDb } from "./support/each-db.ts";

const HOST = "mine.code.acc-host.example.test";

describeOnEachDb("private box URLs", (env) => {
  let owner: TestClient;
  let agent: TestClient;
  let publicKey: KeyObject;
  let me: { id: string; email: string };

  const open = (client: TestClient, host: string, next = "/") =>
    client.get(`/api/v1/access/open?${new URLSearchParams({ host, next })}`);
  /** The hand-off token in an /access/open answer, verified with the key agents get. */
  const claimsOf = (res: { status: number; headers: Headers }): AccessClaims => {
    expect(res.status).toBe(302);
    const token = new URL(res.headers.get("location")!).searchParams.get("token")!;
    const verdict = verify(publicKey, token, Date.now());
    if (!verdict.ok) throw new Error(`hand-off token refused: ${verdict.reason}`);
    return verdict.claims;
  };
  const endedOn = async (client: TestClient) =>
    (await client.post("/agent/v1/heartbeat", heartbeat())).body.endedSessions as string[];

  beforeAll(async () => {
    owner = await signedInClient(env().url, "owner");
    agent = await registerServer(await env().admin(), "acc-host", { publicScheme: "http", publicPort: 8088 });
    publicKey = publicKeyFromPem((await agent.post("/agent/v1/heartbeat", heartbeat())).body.accessPublicKey);
    await owner.post("/api/v1/boxes", { template: "minimal", name: "mine" });
    me = (await owner.get("/api/v1/me")).body;
  });

  it("hands the owner a short-lived token the agent can verify, and nobody else", async () => {
    const token = (await owner.post("/api/v1/tokens", { name: "t" })).body.token as string;
    const res = await fetch(
      `${env().url}/api/v1/access/open?${new URLSearchParams({ host: `${HOST}:8088`, next: "/?folder=/work" })}`,
      { headers: { authorization: `Bearer ${token}` }, redirect: "manual" },
    );
    expect(res.status).toBe(302);
    const location = new URL(res.headers.get("location")!);
    expect(location.origin).toBe(`http://${HOST}:8088`);
    expect(location.pathname).toBe("/__doppio/auth");
    expect(location.searchParams.get("next")).toBe("/?folder=/work");
    const verdict = verify(publicKey, location.searchParams.get("token")!, Date.now(), {
      sub: "mine",
      usr: me.id,
      aud: "code",
      hst: "code",
    });
    expect(verdict.ok).toBe(true);
    if (verdict.ok) {
      expect(verdict.claims.exp * 1000 - Date.now()).toBeLessThanOrEqual(60_000);
      // Bound to the API token it was opened with (never the token itself).
      expect(verdict.claims.sid).toBe(accessSessionId(sha256(token)));
    }

    expect(claimsOf(await open(owner, "5173-mine.code.acc-host.example.test")).hst).toBe("dev:5173");

    const stranger = await signedInClient(env().url, "stranger");
    expect((await open(stranger, HOST)).status).toBe(404);
    expect((await open(owner, "nope.code.acc-host.example.test")).status).toBe(404);
    const evilNext = await open(owner, HOST, "//evil.example");
    expect(new URL(evilNext.headers.get("location")!).searchParams.get("next")).toBe("/");

    const anon = await open(new TestClient(env().url), HOST);
    expect(anon.status).toBe(302);
    expect(anon.headers.get("location")).toMatch(/^\/dashboard\/login\?next=%2Fapi%2Fv1%2Faccess%2Fopen/);
  });

  it("sends the browser to the box host built from the slug and the server's domain, never the caller's host string", async () => {
    for (const [host, origin] of [
      // Parses as the box, but as a URL authority it is user info in front of evil.example.
      [`${HOST}:@evil.example`, `http://${HOST}:8088`],
      [`MINE.Code.ACC-host.example.test.:9999`, `http://${HOST}:8088`],
      [
        "5173-mine.code.acc-host.example.test:@evil.example",
        `http://5173-mine.code.acc-host.example.test:8088`,
      ],
    ] as const) {
      const res = await open(owner, host);
      expect(res.status, host).toBe(302);
      const location = new URL(res.headers.get("location")!);
      expect(location.origin, host).toBe(origin);
      expect(location.username, host).toBe("");
    }
  });

  it("signing out ends the box access it handed off: the box's server hears it with its heartbeats", async () => {
    // A second sign-in of the same user, so the other one stays signed in.
    const laptop = new TestClient(env().url);
    expect((await laptop.post("/api/v1/auth/login", { email: me.email, password: PASSWORD })).status).toBe(
      200,
    );
    const laptopSid = claimsOf(await open(laptop, HOST)).sid!;
    const ownerSid = claimsOf(await open(owner, HOST)).sid!;
    expect(laptopSid).not.toBe(ownerSid);
    expect(await endedOn(agent)).not.toContain(laptopSid);

    expect((await laptop.post("/api/v1/auth/logout")).status).toBe(204);
    const ended = await endedOn(agent);
    expect(ended).toContain(laptopSid);
    expect(ended).not.toContain(ownerSid);
    // Only servers the sign-in opened a box on are told.
    const other = await registerServer(await env().admin(), "acc-other");
    expect(await endedOn(other)).not.toContain(laptopSid);

    // Kept for as long as a cookie from it can live (hand-off 60 s + cookie 12 h), then pruned.
    const [server] = await env().cp.ctx.db.select().from(servers).where(eq(servers.name, "acc-host"));
    const at = (ms: number) => ({ ...env().cp.ctx, clock: { now: () => new Date(Date.now() + ms) } });
    expect(await endedBoxAccess(at(12 * 3600_000), server!.id)).toContain(laptopSid);
    expect(await endedBoxAccess(at(12 * 3600_000 + 120_000), server!.id)).not.toContain(laptopSid);
    expect(await reapTick(at(12 * 3600_000 + 120_000))).toMatchObject({ ran: true });
    const left = await env()
      .cp.ctx.db.select()
      .from(boxAccessGrants)
      .where(eq(boxAccessGrants.sid, laptopSid));
    expect(left).toEqual([]);
  });

  it("revoking an API token ends the box access it handed off, like a sign-out", async () => {
    const created = await owner.post("/api/v1/tokens", { name: "script" });
    expect(created.status).toBe(201);
    const script = owner.withBearer(created.body.token);
    const scriptSid = claimsOf(await open(script, HOST)).sid!;
    expect(await endedOn(agent)).not.toContain(scriptSid);
    expect((await owner.del(`/api/v1/tokens/${created.body.id}`)).status).toBe(204);
    expect(await endedOn(agent)).toContain(scriptSid);
    expect(await endedOn(agent)).not.toContain(claimsOf(await open(owner, HOST)).sid);
  });
});
