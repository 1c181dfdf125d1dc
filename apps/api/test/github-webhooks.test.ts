import { createHmac } from "node:crypto";
import { eq } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { githubInstallations } from "../src/db/schema.ts";
import { heartbeat, registerServer, signedInClient, type TestClient } from "./support/client.ts";
import { startControlPlane, type TestControlPlane } from "./support/control-plane.ts";
import { browserGet, githubConfig, linkAndConnect, oauthFlow } from "./support/github.ts";
import { GitHubStandIn } from "./support/github-standin.ts";

/** Webhooks and the install callback: what GitHub says, only when GitHub provably said it. */
describe("GitHub webhooks and installations", () => {
  const gh = new GitHubStandIn();
  let env: TestControlPlane;
  let agent: TestClient;

  beforeAll(async () => {
    await gh.start();
    env = await startControlPlane({ config: githubConfig(gh) });
    agent = await registerServer(await env.admin(), "hook-host");
    await agent.post("/agent/v1/heartbeat", heartbeat());
  });
  afterAll(async () => {
    await env?.close();
    await gh.stop();
  });

  const send = async (d: { body: string; headers: Record<string, string> }) => {
    const res = await fetch(`${env.url}/api/v1/github/webhooks`, {
      method: "POST",
      headers: d.headers,
      body: d.body,
    });
    return { status: res.status, body: (await res.json()) as { outcome?: string; error?: { code: string } } };
  };
  const installationRow = async (id: number) =>
    (await env.cp.ctx.db.select().from(githubInstallations).where(eq(githubInstallations.id, id)))[0];

  it("records an installation and its repositories from a signed `installation` event", async () => {
    const owner = gh.addUser("hooked", []);
    const inst = gh.install(owner, ["one", "two"]);
    const res = await send(
      gh.delivery("installation", {
        action: "created",
        installation: gh.installationJson(inst),
        repositories: inst.repos.map((r) => ({
          id: r.id,
          node_id: "x",
          name: r.name,
          full_name: r.full_name,
          private: r.private,
        })),
        sender: { login: owner.login, id: owner.id, type: "User", site_admin: false },
      }),
    );
    expect(res).toEqual({ status: 200, body: { outcome: "handled" } });
    expect(await installationRow(inst.id)).toMatchObject({ accountLogin: "hooked", removedAt: null });
  });

  it("refuses a missing, wrong or other-body signature with 401 and changes nothing", async () => {
    const owner = gh.addUser("forged", []);
    const inst = gh.install(owner, ["x"]);
    const good = gh.delivery("installation", { action: "created", installation: gh.installationJson(inst) });
    const { "x-hub-signature-256": _, ...unsigned } = good.headers;
    expect((await send({ body: good.body, headers: unsigned })).status).toBe(401);
    const wrongKey = `sha256=${createHmac("sha256", "not-the-secret").update(good.body).digest("hex")}`;
    expect(
      (await send({ body: good.body, headers: { ...good.headers, "x-hub-signature-256": wrongKey } })).status,
    ).toBe(401);
    // The right signature over other bytes (one space added): the signature covers the raw body.
    expect((await send({ body: `${good.body} `, headers: good.headers })).status).toBe(401);
    expect(
      (await send({ body: good.body, headers: { ...good.headers, "x-hub-signature-256": "sha256=zz" } }))
        .status,
    ).toBe(401);
    expect(await installationRow(inst.id)).toBeUndefined();
    expect((await send(good)).body.outcome).toBe("handled");
  });

  it("takes an installation event larger than the API's usual body limit (many repositories)", async () => {
    const owner = gh.addUser("big-account", []);
    const inst = gh.install(owner, []);
    const repositories = Array.from({ length: 1500 }, (_, i) => ({
      id: 9_000_000 + i,
      node_id: `R_${i}`,
      name: `repository-number-${i}`,
      full_name: `big-account/repository-number-${i}`,
      private: true,
    }));
    const delivery = gh.delivery("installation", {
      action: "created",
      installation: gh.installationJson(inst),
      repositories,
      sender: { login: owner.login, id: owner.id, type: "User", site_admin: false },
    });
    expect(delivery.body.length).toBeGreaterThan(64 * 1024);
    expect((await send(delivery)).body.outcome).toBe("handled");
  });

  it("applies a delivery once: a replay with the same X-GitHub-Delivery is a no-op", async () => {
    const user = await signedInClient(env.url, "replay");
    const ghUser = gh.addUser("replay-gh", [
      { email: "replay-gh@example.com", primary: true, verified: true },
    ]);
    const inst = gh.install(ghUser, ["kept", "dropped"]);
    await linkAndConnect(user, gh, ghUser, inst.id);
    const [kept, dropped] = inst.repos;
    const removal = gh.delivery("installation_repositories", {
      action: "removed",
      installation: gh.installationJson(inst),
      repository_selection: "selected",
      repositories_added: [],
      repositories_removed: [
        { id: dropped!.id, node_id: "x", name: dropped!.name, full_name: dropped!.full_name, private: true },
      ],
      sender: { login: ghUser.login, id: ghUser.id, type: "User", site_admin: false },
    });
    expect((await send(removal)).body.outcome).toBe("handled");
    const names = async () =>
      (await user.get("/api/v1/github/repos")).body.repositories.map((r: { fullName: string }) => r.fullName);
    expect(await names()).toEqual([kept!.full_name]);

    const readd = gh.delivery("installation_repositories", {
      action: "added",
      installation: gh.installationJson(inst),
      repository_selection: "selected",
      repositories_added: [
        { id: dropped!.id, node_id: "x", name: dropped!.name, full_name: dropped!.full_name, private: true },
      ],
      repositories_removed: [],
      sender: { login: ghUser.login, id: ghUser.id, type: "User", site_admin: false },
    });
    expect((await send(readd)).body.outcome).toBe("handled");
    expect(await names()).toEqual([dropped!.full_name, kept!.full_name].sort());
    // The removal delivered again (GitHub redelivers, or someone replays it): nothing changes.
    expect(await send(removal)).toEqual({ status: 200, body: { outcome: "duplicate" } });
    expect(await names()).toEqual([dropped!.full_name, kept!.full_name].sort());
  });

  it("unlinks the user and stops their tokens on `github_app_authorization` revoked", async () => {
    const user = await signedInClient(env.url, "revoker");
    const ghUser = gh.addUser("revoker-gh", [
      { email: "revoker-gh@example.com", primary: true, verified: true },
    ]);
    const inst = gh.install(ghUser, ["repo"]);
    await linkAndConnect(user, gh, ghUser, inst.id);
    await user.post("/api/v1/boxes", { template: "minimal", name: "revoked-box", repo: "revoker-gh/repo" });
    expect((await agent.post("/agent/v1/boxes/revoked-box/git-credential", {})).status).toBe(200);
    const res = await send(
      gh.delivery("github_app_authorization", {
        action: "revoked",
        sender: { login: ghUser.login, id: ghUser.id, type: "User", site_admin: false },
      }),
    );
    expect(res.body.outcome).toBe("handled");
    expect((await user.get("/api/v1/github")).body.account).toBeNull();
    expect((await agent.post("/agent/v1/boxes/revoked-box/git-credential", {})).status).toBe(404);
  });

  it("suspending an installation stops tokens; unsuspending restores them", async () => {
    const user = await signedInClient(env.url, "suspend");
    const ghUser = gh.addUser("suspend-gh", [
      { email: "suspend-gh@example.com", primary: true, verified: true },
    ]);
    const inst = gh.install(ghUser, ["r"]);
    await linkAndConnect(user, gh, ghUser, inst.id);
    await user.post("/api/v1/boxes", { template: "minimal", name: "suspended-box" });
    expect((await agent.post("/agent/v1/boxes/suspended-box/git-credential", {})).status).toBe(200);
    inst.suspended = true;
    await send(gh.delivery("installation", { action: "suspend", installation: gh.installationJson(inst) }));
    expect((await agent.post("/agent/v1/boxes/suspended-box/git-credential", {})).status).toBe(404);
    inst.suspended = false;
    await send(gh.delivery("installation", { action: "unsuspend", installation: gh.installationJson(inst) }));
    expect((await agent.post("/agent/v1/boxes/suspended-box/git-credential", {})).status).toBe(200);
  });

  it("setup URL: records only installations the user's own GitHub token can see, with their own unexpired state", async () => {
    const user = await signedInClient(env.url, "setup");
    const ghUser = gh.addUser("setup-gh", [{ email: "setup-gh@example.com", primary: true, verified: true }]);
    await oauthFlow(env.url, gh, ghUser, { intent: "link", session: user.sessionCookie });
    const connect = await user.post("/api/v1/github/connect", {});
    expect(connect.status).toBe(200);
    const url = new URL(connect.body.url);
    expect(url.origin + url.pathname).toBe(`${gh.webUrl}/apps/${gh.appSlug}/installations/new`);
    const state = url.searchParams.get("state")!;

    // Someone else's installation id, with the user's own valid state.
    const stranger = gh.addUser("stranger-gh", []);
    const foreign = gh.install(stranger, ["secret"]);
    const setup = (id: number, s: string, cookie = user.sessionCookie!) =>
      browserGet(
        env.url,
        `/api/v1/github/setup?installation_id=${id}&setup_action=install&state=${encodeURIComponent(s)}`,
        [cookie],
      );
    expect((await setup(foreign.id, state)).status).toBe(403);
    expect(await installationRow(foreign.id)).toBeUndefined();

    // The user's own installation, with a tampered, another user's, or an expired state.
    const mine = gh.install(ghUser, ["mine"]);
    expect((await setup(mine.id, `${state.slice(0, -2)}xx`)).status).toBe(403);
    const other = await signedInClient(env.url, "setup-other");
    await oauthFlow(env.url, gh, gh.addUser("setup-other-gh", []), {
      intent: "link",
      session: other.sessionCookie,
    });
    const otherState = new URL((await other.post("/api/v1/github/connect", {})).body.url).searchParams.get(
      "state",
    )!;
    expect((await setup(mine.id, otherState)).status).toBe(403);
    const clock = env.cp.ctx.clock;
    env.cp.ctx.clock = { now: () => new Date(Date.now() + 31 * 60_000) };
    try {
      expect((await setup(mine.id, state)).status).toBe(403);
    } finally {
      env.cp.ctx.clock = clock;
    }
    expect(await installationRow(mine.id)).toBeUndefined();

    const ok = await setup(mine.id, state);
    expect(ok.location).toBe("/dashboard/settings?github=connected");
    const status = (await user.get("/api/v1/github")).body;
    expect(status.installations).toEqual([
      {
        id: mine.id,
        account: "setup-gh",
        accountType: "User",
        repositorySelection: "selected",
        state: "active",
      },
    ]);
    expect(status.repositories).toEqual([
      { fullName: "setup-gh/mine", private: true, installationId: mine.id },
    ]);
  });
});
