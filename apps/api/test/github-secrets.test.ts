import { randomBytes } from "node:crypto";
import { Writable } from "node:stream";
import { sql } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SecretBox } from "../src/auth/sealed.ts";
import { heartbeat, registerServer, signedInClient } from "./support/client.ts";
import {
  DB_KINDS,
  dbUnavailable,
  startControlPlane,
  type TestControlPlane,
} from "./support/control-plane.ts";
import { githubConfig, linkAndConnect, oauthFlow } from "./support/github.ts";
import { GitHubStandIn } from "./support/github-standin.ts";

describe("SecretBox (sealed secrets)", () => {
  const box = new SecretBox(randomBytes(32));

  it("opens what it sealed, only under the same purpose and key, and refuses tampering", () => {
    const sealed = box.seal("ghu_secret", "github_accounts.token.u1");
    expect(sealed).not.toContain("ghu_secret");
    expect(box.open(sealed, "github_accounts.token.u1")).toBe("ghu_secret");
    expect(() => box.open(sealed, "github_accounts.token.u2")).toThrow();
    expect(() => new SecretBox(randomBytes(32)).open(sealed, "github_accounts.token.u1")).toThrow();
    const parts = sealed.split(".");
    const body = Buffer.from(parts[2]!, "base64url");
    body[0]! ^= 1;
    parts[2] = body.toString("base64url");
    expect(() => box.open(parts.join("."), "github_accounts.token.u1")).toThrow();
    // Two seals of one value differ (a fresh nonce each time).
    expect(box.seal("x", "p")).not.toBe(box.seal("x", "p"));
  });
});

for (const kind of DB_KINDS) {
  const why = dbUnavailable(kind);
  if (why) console.warn(`SKIPPING github secrets at rest on ${kind}: ${why}`);
  describe.skipIf(why !== null)(`GitHub secrets at rest and in logs [${kind}]`, () => {
    const gh = new GitHubStandIn();
    let env: TestControlPlane;
    let logs = "";

    beforeAll(async () => {
      await gh.start();
      const logTo = new Writable({
        write(chunk, _enc, done) {
          logs += chunk.toString();
          done();
        },
      });
      env = await startControlPlane({ kind, config: { ...githubConfig(gh), logLevel: "trace" }, logTo });
    });
    afterAll(async () => {
      await env?.close();
      await gh.stop();
    });

    async function dumpDatabase(): Promise<string> {
      const db = env.cp.ctx.db;
      const rowsOf = (res: unknown): Record<string, unknown>[] =>
        Array.isArray(res) ? res : ((res as { rows: Record<string, unknown>[] }).rows ?? []);
      const tables = rowsOf(
        await db.execute(sql`SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'`),
      ).map((r) => String(r.table_name));
      expect(tables).toContain("github_accounts");
      let out = "";
      for (const t of tables)
        out += JSON.stringify(rowsOf(await db.execute(sql.raw(`SELECT * FROM "${t}"`))));
      return out;
    }

    it("keeps no plaintext app key, client or webhook secret, user token or installation token", async () => {
      const user = await signedInClient(env.url, "secrets");
      const ghUser = gh.addUser("secrets-gh", [
        { email: "secrets-gh@example.com", primary: true, verified: true },
      ]);
      const inst = gh.install(ghUser, ["vault"]);
      await linkAndConnect(user, gh, ghUser, inst.id);
      const agent = await registerServer(await env.admin(), `secrets-host-${kind}`);
      await agent.post("/agent/v1/heartbeat", heartbeat());
      await user.post("/api/v1/boxes", {
        template: "minimal",
        name: `vault-${kind}`,
        repo: "secrets-gh/vault",
      });
      const cred = await agent.post(`/agent/v1/boxes/vault-${kind}/git-credential`, {});
      expect(cred.status).toBe(200);
      // A sign-in too, so a login's user token is stored as well.
      await oauthFlow(env.url, gh, ghUser);

      const userTokens = gh.userTokensOf(ghUser.id);
      expect(userTokens.length).toBeGreaterThanOrEqual(2);
      const keyBody = gh.privateKeyPem.split("\n").slice(5, 8).join("");
      const secrets = {
        keyBody,
        clientSecret: gh.clientSecret,
        webhookSecret: gh.webhookSecret,
        installationToken: cred.body.token as string,
        ...Object.fromEntries(userTokens.map((t, i) => [`userToken${i}`, t])),
      };
      const dump = await dumpDatabase();
      expect(dump).toContain("secrets-gh"); // the dump does hold the account
      for (const [name, value] of Object.entries(secrets)) {
        expect(value.length, name).toBeGreaterThan(20);
        expect(dump.includes(value), `${name} in the database`).toBe(false);
        expect(logs.includes(value), `${name} in the logs`).toBe(false);
      }
      // And no API answer carries them.
      const status = JSON.stringify((await user.get("/api/v1/github")).body);
      for (const value of Object.values(secrets)) expect(status.includes(value)).toBe(false);
    });
  });
}
