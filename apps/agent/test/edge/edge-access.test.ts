import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { findCaddy } from "../support/caddy.ts";
import { edgeRequest } from "./fixtures.ts";
import { cookieFrom, DOMAIN, type Edge, forHost, SESSION, startEdge } from "./harness.ts";

const hasCaddy = findCaddy() !== null;
if (!hasCaddy)
  console.warn("SKIPPING edge access tests: `caddy` (2.6.2, apt-get install caddy) is not on PATH");

const code = (slug: string) => `${slug}.code.${DOMAIN}`;
const dev = (port: number, slug: string) => `${port}-${slug}.code.${DOMAIN}`;
const ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/** Hand-off single use, host binding and sign-out, through a real Caddy and the agent's SQLite store. */
describe.skipIf(!hasCaddy)("box access at the edge", () => {
  let e: Edge;
  const req = (host: string, path: string, cookie?: string) =>
    edgeRequest(e.edge, host, path, cookie ? { headers: { cookie } } : {});
  const exchange = (host: string, token: string) => req(host, `/__doppio/auth?token=${token}&next=/`);
  const signIn = async (host: string, sid = SESSION) => {
    const res = await exchange(host, e.handoff({ ...forHost(host), sid }));
    expect(res.status).toBe(302);
    return cookieFrom(res.headers["set-cookie"]);
  };
  const refused = async (res: Awaited<ReturnType<typeof req>>, reason: string) => {
    expect(res.status).toBe(401);
    expect(res.headers["set-cookie"]).toBeUndefined();
    expect(res.body).toContain(reason);
  };

  beforeAll(async () => {
    e = await startEdge();
    e.box("alpha");
    e.box("bravo");
    expect(await e.keeper.ensureConfig()).toBe("loaded");
  });
  afterAll(async () => {
    await e?.close();
  });

  it("a spent hand-off cannot be replayed with its signature spelled another way", async () => {
    const token = e.handoff(forHost(code("alpha")));
    expect((await exchange(code("alpha"), token)).status).toBe(302);
    // The last of the signature's 86 base64url characters has 2 spare bits: same bytes, new text.
    const last = ALPHABET.indexOf(token.at(-1)!);
    const respelled = `${token.slice(0, -1)}${ALPHABET[last ^ 1]}`;
    expect(respelled).not.toBe(token);
    const res = await exchange(code("alpha"), respelled);
    expect(res.status).toBe(401);
    expect(res.headers["set-cookie"]).toBeUndefined();
  });

  it("single use is by token id: another token with a spent jti is refused", async () => {
    const exp = Math.floor(e.clock.now / 1000) + 60;
    const claims = { ...forHost(code("alpha")), sid: SESSION, jti: "fixed-token-id" };
    expect((await exchange(code("alpha"), e.signHandoff({ ...claims, exp }))).status).toBe(302);
    await refused(await exchange(code("alpha"), e.signHandoff({ ...claims, exp: exp + 1 })), "already_used");
  });

  it("the spent list survives an agent restart and is pruned once its tokens have expired", async () => {
    const token = e.handoff(forHost(code("alpha")));
    expect((await exchange(code("alpha"), token)).status).toBe(302);
    await e.restartAgent();
    await refused(await exchange(code("alpha"), token), "already_used");

    expect(e.ledger.counts().spent).toBeGreaterThanOrEqual(3);
    e.clock.now += 120_000; // every token so far has expired
    expect((await exchange(code("alpha"), e.handoff(forHost(code("alpha"))))).status).toBe(302);
    expect(e.ledger.counts().spent).toBe(1);
  });

  it("a cookie opens only the box host it was issued on", async () => {
    const devCookie = await signIn(dev(5173, "alpha"));
    const codeCookie = await signIn(code("alpha"));
    expect((await req(dev(5173, "alpha"), "/", devCookie)).status).toBe(200);
    expect((await req(code("alpha"), "/", codeCookie)).status).toBe(200);
    // Same box, another host: a dev port's cookie does not open code-server, nor the reverse.
    expect((await req(code("alpha"), "/", devCookie)).status).toBe(401);
    expect((await req(dev(5173, "alpha"), "/", codeCookie)).status).toBe(401);
    // Another box of the same owner.
    expect((await req(code("bravo"), "/", codeCookie)).status).toBe(401);
    // A hand-off for one host cannot be exchanged on another.
    await refused(await exchange(code("alpha"), e.handoff(forHost(dev(5173, "alpha")))), "wrong_host");
  });

  it("a signed-out session's cookies and unspent hand-offs stop working, also after a restart", async () => {
    const ended = await signIn(code("alpha"), "laptop");
    const other = await signIn(code("alpha"), "desktop");
    const pending = e.handoff({ ...forHost(code("alpha")), sid: "laptop" });
    expect((await req(code("alpha"), "/", ended)).status).toBe(200);

    e.access.endSessions(["laptop"]); // as a heartbeat answer delivers it
    expect((await req(code("alpha"), "/", ended)).status).toBe(401);
    expect((await req(code("alpha"), "/", other)).status).toBe(200);
    await refused(await exchange(code("alpha"), pending), "signed_out");

    await e.restartAgent();
    expect((await req(code("alpha"), "/", ended)).status).toBe(401);
    expect((await req(code("alpha"), "/", other)).status).toBe(200);

    // Forgotten once no cookie from it can be alive.
    expect(e.ledger.counts().ended).toBe(1);
    e.clock.now += 12 * 3600_000 + 1_000;
    e.access.endSessions([]);
    expect(e.ledger.counts().ended).toBe(0);
  });
});
