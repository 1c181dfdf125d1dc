import { eq } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { auditEvents, githubAccounts } from "../src/db/schema.ts";
import { signedInClient, type TestClient } from "./support/client.ts";
import { startControlPlane, type TestControlPlane } from "./support/control-plane.ts";
import { connectInstallation, githubConfig, linkAndConnect } from "./support/github.ts";
import { GitHubStandIn, type StandInUser } from "./support/github-standin.ts";

const HOUR = 3_600_000;

/**
 * Expiring user tokens (GitHub's default for apps: 8 hours, with a 6-month, one-use refresh
 * token): the control plane keeps the refresh token sealed and, when the user token is about
 * to expire, swaps both for new ones before using it (here: to check a new installation on
 * the setup URL), through the real Octokit client against the stand-in.
 */
describe("GitHub user token refresh", () => {
  const gh = new GitHubStandIn();
  let env: TestControlPlane;
  let user: TestClient;
  let ghUser: StandInUser;
  let userId: string;
  let shift = 0;
  /** Hours pass for the control plane, and GitHub ends the user tokens they outlive. */
  const later = (ms: number) => {
    shift += ms;
    gh.expireUserTokens(ghUser.id);
  };
  const account = async () =>
    (await env.cp.ctx.db.select().from(githubAccounts).where(eq(githubAccounts.userId, userId)))[0]!;

  beforeAll(async () => {
    await gh.start();
    env = await startControlPlane({
      config: githubConfig(gh),
      clock: { now: () => new Date(Date.now() + shift) },
    });
    user = await signedInClient(env.url, "refresh");
    userId = (await user.get("/api/v1/me")).body.id as string;
    ghUser = gh.addUser("refresher", [{ email: "refresher@example.com", primary: true, verified: true }]);
    await linkAndConnect(user, gh, ghUser, gh.install(ghUser, ["one"]).id);
  });
  afterAll(async () => {
    await env?.close();
    await gh.stop();
  });

  it("keeps GitHub's refresh token sealed, with both expiries", async () => {
    const row = await account();
    const now = Date.now() + shift;
    expect(row.tokenExpiresAt!.getTime()).toBeGreaterThan(now + 7.9 * HOUR);
    expect(row.refreshTokenExpiresAt!.getTime()).toBeGreaterThan(now + 180 * 24 * HOUR);
    expect(row.refreshTokenSealed).toBeTruthy();
    for (const t of gh.userTokensOf(ghUser.id)) {
      expect(row.refreshTokenSealed!.includes(t)).toBe(false);
      expect(row.tokenSealed.includes(t)).toBe(false);
    }
  });

  it("uses the user token as it is while it is valid", async () => {
    await connectInstallation(user, gh.install(ghUser, ["two"]).id);
    expect(gh.refreshes).toEqual([]);
  });

  it("refreshes an expired user token before using it, once, and stores the new pair", async () => {
    const before = await account();
    later(9 * HOUR);
    await connectInstallation(user, gh.install(ghUser, ["three"]).id);
    expect(gh.refreshes).toEqual([{ ok: true }]);
    const after = await account();
    expect(after.refreshTokenSealed).not.toBe(before.refreshTokenSealed);
    expect(after.tokenExpiresAt!.getTime()).toBeGreaterThan(Date.now() + shift + 7.9 * HOUR);
    // The new token serves the next connect without another refresh.
    await connectInstallation(user, gh.install(ghUser, ["four"]).id);
    expect(gh.refreshes).toHaveLength(1);
    const audits = await env.cp.ctx.db
      .select()
      .from(auditEvents)
      .where(eq(auditEvents.action, "github.token.refresh"));
    expect(audits.map((a) => a.targetId)).toEqual([userId]);
    expect(JSON.stringify(audits)).not.toMatch(/gh[ur]_/);
  });

  it("asks the user to link again when GitHub refuses the refresh token, and keeps the link", async () => {
    gh.revokeRefreshTokens(ghUser.id);
    later(9 * HOUR);
    const connect = await user.post("/api/v1/github/connect", {});
    const state = new URL(connect.body.url).searchParams.get("state")!;
    const id = gh.install(ghUser, ["five"]).id;
    const res = await fetch(
      `${env.url}/api/v1/github/setup?installation_id=${id}&setup_action=install&state=${encodeURIComponent(state)}`,
      { redirect: "manual", headers: { cookie: user.sessionCookie! } },
    );
    const body = (await res.json()) as { error: { code: string; message: string } };
    expect(gh.refreshes.at(-1)).toEqual({ ok: false, error: "bad_refresh_token" });
    expect(res.status).toBe(409);
    expect(body.error.message).toContain("link GitHub again");
    expect((await user.get("/api/v1/github")).body.account.login).toBe("refresher");
  });
});
