import { and, eq, like } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { auditEvents } from "../src/db/schema.ts";
import { TOKEN_REUSE_MARGIN_MS } from "../src/github/tokens.ts";
import { heartbeat, registerServer, signedInClient, type TestClient } from "./support/client.ts";
import {
  DB_KINDS,
  dbUnavailable,
  startControlPlane,
  type TestControlPlane,
} from "./support/control-plane.ts";
import { githubConfig, linkAndConnect } from "./support/github.ts";
import { GitHubStandIn, type StandInUser } from "./support/github-standin.ts";

/**
 * Installation access tokens for boxes, end to end through the real Octokit client: the
 * agent asks for a box's credential, the control plane signs an app JWT, GitHub (the
 * stand-in) checks it and issues a token scoped to the box's repository.
 */
for (const kind of DB_KINDS) {
  const why = dbUnavailable(kind);
  if (why) console.warn(`SKIPPING github tokens on ${kind}: ${why}`);
  describe.skipIf(why !== null)(`GitHub installation tokens for boxes [${kind}]`, () => {
    const gh = new GitHubStandIn();
    let env: TestControlPlane;
    let agent: TestClient;
    let alice: TestClient;
    let ghAlice: StandInUser;
    let installationId: number;

    beforeAll(async () => {
      await gh.start();
      env = await startControlPlane({ kind, config: githubConfig(gh) });
      const admin = await env.admin();
      agent = await registerServer(admin, `gh-host-${kind}`);
      await agent.post("/agent/v1/heartbeat", heartbeat());
      alice = await signedInClient(env.url, "alice");
      ghAlice = gh.addUser("alice-gh", [{ email: "alice@example.com", primary: true, verified: true }]);
      installationId = gh.install(ghAlice, ["app-a", "app-b"]).id;
      await linkAndConnect(alice, gh, ghAlice, installationId);
    });
    afterAll(async () => {
      await env?.close();
      await gh.stop();
    });

    const credential = (slug: string) => agent.post(`/agent/v1/boxes/${slug}/git-credential`, {});

    it("signs a short app JWT and gets a token for the box's repository only, with contents: write", async () => {
      const created = await alice.post("/api/v1/boxes", {
        template: "minimal",
        name: `repo-a-${kind}`,
        repo: "ALICE-GH/app-a",
      });
      expect(created.status).toBe(202);
      expect(created.body.box.repo).toBe("alice-gh/app-a");
      const jwtsBefore = gh.jwts.length;

      const res = await credential(`repo-a-${kind}`);
      expect(res.status).toBe(200);
      expect(res.body.username).toBe("x-access-token");
      expect(res.body.token).toMatch(/^ghs_/);
      expect(Date.parse(res.body.expiresAt)).toBeGreaterThan(Date.now() + 50 * 60_000);

      const jwt = gh.jwts.at(-1)!;
      expect(gh.jwts.length).toBeGreaterThan(jwtsBefore);
      expect(jwt.iss).toBe(String(gh.appId));
      expect(jwt.exp - jwt.iat).toBeLessThanOrEqual(600);
      expect(gh.tokenRequests.at(-1)).toEqual({
        installationId,
        repositories: ["app-a"],
        permissions: { contents: "write" },
      });
      expect(gh.gitAccess(res.body.token, "alice-gh/app-a", true)).toBe("ok");
      expect(gh.gitAccess(res.body.token, "alice-gh/app-b", false)).toBe("forbidden");

      const rows = await env.cp.ctx.db
        .select()
        .from(auditEvents)
        .where(
          and(like(auditEvents.action, "github.installation_token.%"), eq(auditEvents.targetType, "box")),
        );
      expect(rows.length).toBeGreaterThanOrEqual(1);
      expect(rows.at(-1)!.data).toMatchObject({ installation: installationId, repositories: ["app-a"] });
      expect(JSON.stringify(rows)).not.toContain(res.body.token);
    });

    it("reuses the token until shortly before it expires, then mints a new one", async () => {
      await alice.post("/api/v1/boxes", {
        template: "minimal",
        name: `reuse-${kind}`,
        repo: "alice-gh/app-b",
      });
      const first = await credential(`reuse-${kind}`);
      const requests = gh.tokenRequests.length;
      const again = await credential(`reuse-${kind}`);
      expect(again.body.token).toBe(first.body.token);
      expect(gh.tokenRequests.length).toBe(requests);

      const realClock = env.cp.ctx.clock;
      const late = Date.parse(first.body.expiresAt) - TOKEN_REUSE_MARGIN_MS + 1000;
      env.cp.ctx.clock = { now: () => new Date(late) };
      try {
        const fresh = await credential(`reuse-${kind}`);
        expect(fresh.status).toBe(200);
        expect(fresh.body.token).not.toBe(first.body.token);
        expect(gh.tokenRequests.length).toBe(requests + 1);
      } finally {
        env.cp.ctx.clock = realClock;
      }
    });

    it("gives a box without a repository a token for the repositories the owner connected", async () => {
      await alice.post("/api/v1/boxes", { template: "minimal", name: `norepo-${kind}` });
      const res = await credential(`norepo-${kind}`);
      expect(res.status).toBe(200);
      expect(gh.tokenRequests.at(-1)!.repositories).toEqual(["app-a", "app-b"]);
      expect(gh.gitAccess(res.body.token, "alice-gh/app-b", true)).toBe("ok");
    });

    it("refuses a repository the user did not connect, and another user's repository", async () => {
      const notMine = await alice.post("/api/v1/boxes", { template: "minimal", repo: "someone/else" });
      expect(notMine.status).toBe(400);
      expect(notMine.body.error.details).toMatchObject({ field: "repo" });
      const bob = await signedInClient(env.url, "bob");
      const stolen = await bob.post("/api/v1/boxes", { template: "minimal", repo: "alice-gh/app-a" });
      expect(stolen.status).toBe(400);
      for (const bad of ["a/b/c", "-x/y", "x/..", `${"o".repeat(40)}/r`, "x/y z"]) {
        const res = await alice.post("/api/v1/boxes", { template: "minimal", repo: bad });
        expect(res.status, bad).toBe(400);
      }
      // Bob's box gets nothing from Alice's installation.
      await bob.post("/api/v1/boxes", { template: "minimal", name: `bobs-${kind}` });
      const res = await credential(`bobs-${kind}`);
      expect(res.status).toBe(404);
      expect(res.body.error.message).toBe("GitHub is not connected for this box's owner");
    });

    it("refuses the next token at once when the installation is removed (webhook), even with one cached", async () => {
      const carol = await signedInClient(env.url, "carol");
      const ghCarol = gh.addUser("carol-gh", [{ email: "carol@example.com", primary: true, verified: true }]);
      const inst = gh.install(ghCarol, ["tool"]);
      await linkAndConnect(carol, gh, ghCarol, inst.id);
      await carol.post("/api/v1/boxes", {
        template: "minimal",
        name: `carol-${kind}`,
        repo: "carol-gh/tool",
      });
      expect((await credential(`carol-${kind}`)).status).toBe(200);

      gh.uninstall(inst.id);
      const { body, headers } = gh.delivery("installation", {
        action: "deleted",
        installation: gh.installationJson(inst),
        sender: { login: "carol-gh", id: ghCarol.id, type: "User", site_admin: false },
      });
      const hook = await fetch(`${env.url}/api/v1/github/webhooks`, { method: "POST", headers, body });
      expect(hook.status).toBe(200);

      const res = await credential(`carol-${kind}`);
      expect(res.status).toBe(404);
      expect(res.body.error.message).toContain("carol-gh/tool is no longer connected");
      expect(JSON.stringify(res.body)).not.toMatch(/ghs_/);
    });

    it("answers a clear 503 when GitHub refuses (installation gone before its webhook arrived)", async () => {
      const dave = await signedInClient(env.url, "dave");
      const ghDave = gh.addUser("dave-gh", [{ email: "dave@example.com", primary: true, verified: true }]);
      const inst = gh.install(ghDave, ["lib"]);
      await linkAndConnect(dave, gh, ghDave, inst.id);
      await dave.post("/api/v1/boxes", { template: "minimal", name: `dave-${kind}`, repo: "dave-gh/lib" });
      gh.uninstall(inst.id);
      const res = await credential(`dave-${kind}`);
      expect(res.status).toBe(503);
      expect(res.body.error.message).toContain("GitHub refused a token");
    });

    it("stops tokens when the user unlinks GitHub, and keeps the account", async () => {
      await alice.post("/api/v1/boxes", {
        template: "minimal",
        name: `unlink-${kind}`,
        repo: "alice-gh/app-a",
      });
      expect((await credential(`unlink-${kind}`)).status).toBe(200);
      const unlink = await alice.del("/api/v1/github/account");
      expect(unlink.status).toBe(204);
      const res = await credential(`unlink-${kind}`);
      expect(res.status).toBe(404);
      const status = await alice.get("/api/v1/github");
      expect(status.body).toMatchObject({ configured: true, account: null, repositories: [] });
      expect((await alice.get("/api/v1/me")).status).toBe(200);
    });
  });
}
