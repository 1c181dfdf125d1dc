import { and, eq } from "drizzle-orm";
import { afterEach, expect, it } from "vitest";
import { auditEvents } from "../src/db/schema.ts";
import { type GitCredentialSource, noGitCredentials } from "../src/services/git-credentials.ts";
import { heartbeat, registerServer, signedInClient, type TestClient } from "./support/client.ts";
import { describeOnEachDb } from "./support/each-db.ts";

const CREDENTIAL = {
  username: "x-access-token",
  token: "ghs_test-installation-token",
  expiresAt: "2030-01-01T00:00:00.000Z",
};

describeOnEachDb("agent git credentials", (env) => {
  let owner: TestClient;
  let agentA: TestClient;
  let agentB: TestClient;
  const asked: Array<{ slug: string; owner: string }> = [];

  async function setup() {
    owner ??= await signedInClient(env().url, "git-owner");
    if (!agentA) {
      const admin = await env().admin();
      agentA = await registerServer(admin, "git-host-a");
      // Too small for any box: every box lands on host A.
      agentB = await registerServer(admin, "git-host-b", {
        capacity: { vcpu: 1, memoryMb: 1024, diskGb: 1 },
      });
    }
    await agentA.post("/agent/v1/heartbeat", heartbeat());
    await agentB.post("/agent/v1/heartbeat", heartbeat());
  }

  const recording: GitCredentialSource = {
    async issue({ box, owner: user }) {
      asked.push({ slug: box.slug, owner: user.email });
      return CREDENTIAL;
    },
  };

  afterEach(() => {
    env().cp.ctx.gitCredentials = noGitCredentials;
    asked.length = 0;
  });

  it("issues a credential for the server's own box from the source, and audits it without the token", async () => {
    await setup();
    env().cp.ctx.gitCredentials = recording;
    const created = await owner.post("/api/v1/boxes", { template: "minimal", name: "gitbox" });
    expect(created.status).toBe(202);
    const me = await owner.get("/api/v1/me");

    const res = await agentA.post("/agent/v1/boxes/gitbox/git-credential", {});
    expect(res.status).toBe(200);
    expect(res.body).toEqual(CREDENTIAL);
    expect(res.headers.get("cache-control")).toBe("no-store");
    expect(asked).toEqual([{ slug: "gitbox", owner: me.body.email }]);

    const rows = await env()
      .cp.ctx.db.select()
      .from(auditEvents)
      .where(and(eq(auditEvents.action, "git_credential.issue"), eq(auditEvents.targetType, "box")));
    expect(rows).toHaveLength(1);
    expect(rows[0]!.actorServerId).not.toBeNull();
    expect(rows[0]!.targetId).not.toBe("");
    expect(rows[0]!.data).toMatchObject({ slug: "gitbox", username: "x-access-token" });
    expect(JSON.stringify(rows[0]!.data)).not.toContain(CREDENTIAL.token);
  });

  it("answers 404 for another server's box and for an unknown slug, without asking the source", async () => {
    await setup();
    env().cp.ctx.gitCredentials = recording;
    await owner.post("/api/v1/boxes", { template: "minimal", name: "notyours" });
    const other = await agentB.post("/agent/v1/boxes/notyours/git-credential", {});
    expect(other.status).toBe(404);
    expect(other.body.error.code).toBe("not_found");
    const unknown = await agentA.post("/agent/v1/boxes/no-such-box/git-credential", {});
    expect(unknown.status).toBe(404);
    // "Not yours" and "not there" look the same.
    expect(other.body.error.message).toBe('box "notyours" not found');
    expect(unknown.body.error.message).toBe('box "no-such-box" not found');
    expect(asked).toEqual([]);
  });

  it("answers 404 with a clear message when the owner has nothing to issue from", async () => {
    await setup();
    await owner.post("/api/v1/boxes", { template: "minimal", name: "noconn" });
    const res = await agentA.post("/agent/v1/boxes/noconn/git-credential", {});
    expect(res.status).toBe(404);
    expect(res.body).toEqual({
      error: { code: "not_found", message: "GitHub is not connected for this box's owner" },
    });
  });

  it("refuses callers without an agent token, and users' tokens", async () => {
    await setup();
    await owner.post("/api/v1/boxes", { template: "minimal", name: "authed" });
    const anonymous = owner.withBearer("dpa_not-a-real-token");
    expect((await anonymous.post("/agent/v1/boxes/authed/git-credential", {})).status).toBe(401);
    // The owner's own session is not an agent.
    expect((await owner.post("/agent/v1/boxes/authed/git-credential", {})).status).toBe(401);
  });

  it("does not pass on a malformed credential from a broken source", async () => {
    await setup();
    env().cp.ctx.gitCredentials = { issue: async () => ({ ...CREDENTIAL, expiresAt: "soon" }) };
    await owner.post("/api/v1/boxes", { template: "minimal", name: "broken" });
    const res = await agentA.post("/agent/v1/boxes/broken/git-credential", {});
    expect(res.status).toBe(503);
    expect(res.body.error.code).toBe("unavailable");
    expect(JSON.stringify(res.body)).not.toContain(CREDENTIAL.token);
  });
});
