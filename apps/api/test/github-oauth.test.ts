import { eq } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { githubAccounts, users } from "../src/db/schema.ts";
import { PASSWORD, signedInClient, TestClient, uniqueEmail } from "./support/client.ts";
import { startControlPlane, type TestControlPlane } from "./support/control-plane.ts";
import { browserGet, githubConfig, oauthFlow, sessionCookieOf } from "./support/github.ts";
import { GitHubStandIn } from "./support/github-standin.ts";

/** Sign in with GitHub and linking, through the real Octokit client against the stand-in. */
describe("Sign in with GitHub (OAuth web flow)", () => {
  const gh = new GitHubStandIn();
  let env: TestControlPlane;

  beforeAll(async () => {
    await gh.start();
    env = await startControlPlane({ config: githubConfig(gh) });
  });
  afterAll(async () => {
    await env?.close();
    await gh.stop();
  });

  const me = async (session: string) => {
    const res = await fetch(`${env.url}/api/v1/me`, { headers: { cookie: session } });
    return { status: res.status, body: (await res.json()) as { email: string } };
  };
  const failure = (location: string | null) =>
    new URL(location ?? "/", "http://x").searchParams.get("github_error");

  it("creates an account from the verified primary email, with state, a browser-bound cookie and PKCE S256", async () => {
    const user = gh.addUser("newbie", [
      { email: "other@example.com", primary: false, verified: true },
      { email: "Newbie@Example.com", primary: true, verified: true },
    ]);
    const flow = await oauthFlow(env.url, gh, user);
    const authorize = new URL(flow.start.location!);
    expect(authorize.origin + authorize.pathname).toBe(`${gh.webUrl}/login/oauth/authorize`);
    expect(authorize.searchParams.get("code_challenge_method")).toBe("S256");
    expect(authorize.searchParams.get("code_challenge")).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(authorize.searchParams.get("state")).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(authorize.searchParams.get("redirect_uri")).toBe(`${env.url}/api/v1/auth/github/callback`);
    expect(flow.start.setCookies.join(";")).toMatch(
      /doppio_github_oauth=[^;]+; Max-Age=600; Path=\/api\/v1\/auth\/github; HttpOnly; SameSite=Lax/,
    );

    expect(flow.done.location).toBe("/dashboard/");
    const session = sessionCookieOf(flow.done)!;
    expect((await me(session)).body.email).toBe("newbie@example.com");

    // Signing in again with the same GitHub account opens the same doppio account.
    const again = await oauthFlow(env.url, gh, user);
    expect((await me(sessionCookieOf(again.done)!)).body.email).toBe("newbie@example.com");
  });

  it("refuses a callback whose state was started in another browser, or carries none", async () => {
    const user = gh.addUser("victim", [{ email: "victim@example.com", primary: true, verified: true }]);
    const start = await browserGet(env.url, "/api/v1/auth/github");
    const back = new URL(gh.authorize(start.location!, user));
    // No flow cookie (an attacker's link opened in the victim's browser).
    const bare = await browserGet(env.url, back.pathname + back.search);
    expect(failure(bare.location)).toBe("state_invalid");
    expect(sessionCookieOf(bare)).toBeUndefined();
    // Another flow's cookie.
    const other = await browserGet(env.url, "/api/v1/auth/github");
    const otherCookie = other.setCookies[0]!.split(";")[0]!;
    const mismatched = await browserGet(env.url, back.pathname + back.search, [otherCookie]);
    expect(failure(mismatched.location)).toBe("state_invalid");
    expect(sessionCookieOf(mismatched)).toBeUndefined();
    // The state was spent by the failed attempts: the right cookie does not revive it.
    const late = await browserGet(env.url, back.pathname + back.search, [
      start.setCookies[0]!.split(";")[0]!,
    ]);
    expect(failure(late.location)).toBe("state_invalid");
    const [row] = await env.cp.ctx.db.select().from(users).where(eq(users.email, "victim@example.com"));
    expect(row).toBeUndefined();
  });

  it("refuses a replayed callback, and a replayed code under a fresh state", async () => {
    const user = gh.addUser("replayer", [{ email: "replayer@example.com", primary: true, verified: true }]);
    const flow = await oauthFlow(env.url, gh, user);
    expect(flow.done.location).toBe("/dashboard/");
    const replay = await browserGet(env.url, flow.callbackPath, [flow.oauthCookie]);
    expect(failure(replay.location)).toBe("state_invalid");
    expect(sessionCookieOf(replay)).toBeUndefined();

    const fresh = await browserGet(env.url, "/api/v1/auth/github");
    const state = new URL(fresh.location!).searchParams.get("state")!;
    const oldCode = new URL(flow.callbackPath, env.url).searchParams.get("code")!;
    const reused = await browserGet(env.url, `/api/v1/auth/github/callback?code=${oldCode}&state=${state}`, [
      fresh.setCookies[0]!.split(";")[0]!,
    ]);
    expect(failure(reused.location)).toBe("code_rejected");
    expect(sessionCookieOf(reused)).toBeUndefined();
  });

  it("refuses a state after it expires", async () => {
    const user = gh.addUser("slowpoke", [{ email: "slowpoke@example.com", primary: true, verified: true }]);
    const start = await browserGet(env.url, "/api/v1/auth/github");
    const back = new URL(gh.authorize(start.location!, user));
    const clock = env.cp.ctx.clock;
    env.cp.ctx.clock = { now: () => new Date(Date.now() + 11 * 60_000) };
    try {
      const late = await browserGet(env.url, back.pathname + back.search, [
        start.setCookies[0]!.split(";")[0]!,
      ]);
      expect(failure(late.location)).toBe("state_invalid");
    } finally {
      env.cp.ctx.clock = clock;
    }
  });

  it("creates no account when the primary email is not verified", async () => {
    const user = gh.addUser("unverified", [
      { email: "unverified@example.com", primary: true, verified: false },
      { email: "secondary@example.com", primary: false, verified: true },
    ]);
    const flow = await oauthFlow(env.url, gh, user);
    expect(failure(flow.done.location)).toBe("email_unverified");
    expect(sessionCookieOf(flow.done)).toBeUndefined();
    for (const email of ["unverified@example.com", "secondary@example.com"]) {
      expect(await env.cp.ctx.db.select().from(users).where(eq(users.email, email))).toEqual([]);
    }
  });

  it("never signs into an existing password account by email; its owner links from settings", async () => {
    const email = uniqueEmail("linker");
    const owner = new TestClient(env.url);
    expect((await owner.post("/api/v1/auth/signup", { email, password: PASSWORD })).status).toBe(201);
    const user = gh.addUser("linker-gh", [{ email, primary: true, verified: true }]);

    const stranger = await oauthFlow(env.url, gh, user);
    expect(failure(stranger.done.location)).toBe("email_taken");
    expect(sessionCookieOf(stranger.done)).toBeUndefined();

    // Linking needs the browser's session: without it the flow does not even start.
    const anonymous = await browserGet(env.url, "/api/v1/auth/github?intent=link");
    expect(anonymous.location).toBe("/dashboard/login?next=%2Fdashboard%2Fsettings");

    const linked = await oauthFlow(env.url, gh, user, { intent: "link", session: owner.sessionCookie });
    expect(linked.done.location).toBe("/dashboard/settings?github=linked");
    const status = await owner.get("/api/v1/github");
    expect(status.body.account).toMatchObject({ login: "linker-gh", id: user.id, createdByGithub: false });

    // Now GitHub signs into that account.
    const signIn = await oauthFlow(env.url, gh, user);
    expect((await me(sessionCookieOf(signIn.done)!)).body.email).toBe(email);

    // Unlinking keeps the account and its password.
    expect((await owner.del("/api/v1/github/account")).status).toBe(204);
    expect((await owner.get("/api/v1/github")).body.account).toBeNull();
    const login = await new TestClient(env.url).post("/api/v1/auth/login", { email, password: PASSWORD });
    expect(login.status).toBe(200);
  });

  it("refuses linking a GitHub account that another user linked, and a link finished under another session", async () => {
    const a = await signedInClient(env.url, "link-a");
    const b = await signedInClient(env.url, "link-b");
    const user = gh.addUser("shared-gh", [{ email: "shared@example.com", primary: true, verified: true }]);
    expect(
      (await oauthFlow(env.url, gh, user, { intent: "link", session: a.sessionCookie })).done.location,
    ).toBe("/dashboard/settings?github=linked");
    const taken = await oauthFlow(env.url, gh, user, { intent: "link", session: b.sessionCookie });
    expect(failure(taken.done.location)).toBe("already_linked");

    // B starts a link, but the callback arrives with A's session: refused.
    const other = gh.addUser("other-gh", [{ email: "other-gh@example.com", primary: true, verified: true }]);
    const start = await browserGet(env.url, "/api/v1/auth/github?intent=link", [b.sessionCookie!]);
    const back = new URL(gh.authorize(start.location!, other));
    const crossed = await browserGet(env.url, back.pathname + back.search, [
      a.sessionCookie!,
      start.setCookies[0]!.split(";")[0]!,
    ]);
    expect(failure(crossed.location)).toBe("state_invalid");
    const rows = await env.cp.ctx.db
      .select()
      .from(githubAccounts)
      .where(eq(githubAccounts.githubId, other.id));
    expect(rows).toEqual([]);
  });

  it("does not let an account made by GitHub unlink (it has no password)", async () => {
    const user = gh.addUser("gh-only", [{ email: "gh-only@example.com", primary: true, verified: true }]);
    const flow = await oauthFlow(env.url, gh, user);
    const session = sessionCookieOf(flow.done)!;
    const res = await fetch(`${env.url}/api/v1/github/account`, {
      method: "DELETE",
      headers: { cookie: session, origin: env.url, "content-type": "application/json" },
      body: "{}",
    });
    expect(res.status).toBe(409);
  });
});

describe("GitHub when no app is configured", () => {
  let env: TestControlPlane;
  beforeAll(async () => {
    env = await startControlPlane();
  });
  afterAll(async () => {
    await env?.close();
  });

  it("explains on the login page, reports configured: false, and answers 404 to connect and webhooks", async () => {
    const start = await browserGet(env.url, "/api/v1/auth/github");
    expect(start.location).toBe("/dashboard/login?github_error=not_configured");
    const user = await signedInClient(env.url, "no-gh");
    expect((await user.get("/api/v1/github")).body).toEqual({
      configured: false,
      appSlug: null,
      account: null,
      installations: [],
      repositories: [],
    });
    expect((await user.post("/api/v1/github/connect", {})).status).toBe(404);
    const hook = await fetch(`${env.url}/api/v1/github/webhooks`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-github-event": "ping", "x-github-delivery": "1" },
      body: "{}",
    });
    expect(hook.status).toBe(404);
  });
});
