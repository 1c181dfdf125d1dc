import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { registerServer, signedInClient } from "../../api/test/support/client.ts";
import { startControlPlane, type TestControlPlane } from "../../api/test/support/control-plane.ts";
import { ansibleMissing } from "../../api/test/support/plays.ts";
import { freePort } from "../../api/test/support/ports.ts";
import { buildCli, type CliHome, cliHome } from "./support/cli.ts";

/**
 * `doppio admin servers …` against a real control plane running real ansible-playbook plays
 * on an SSH target nobody answers at (a closed loopback port): the play fails unreachable.
 */
const missing = ansibleMissing();
if (missing) console.warn(`[cli admin servers] SKIPPED: ${missing}`);

describe.skipIf(missing !== null)("doppio admin servers", () => {
  let cp: TestControlPlane;
  let home: CliHome;
  let adminEnv: NodeJS.ProcessEnv;
  let userEnv: NodeJS.ProcessEnv;

  beforeAll(async () => {
    [cp] = await Promise.all([startControlPlane(), buildCli()]);
    const admin = await cp.admin();
    await registerServer(admin, "cli-prov", { status: "pending" });
    // A port nothing listens on: the play finds the host unreachable.
    const port = await freePort();
    await admin.post("/api/v1/servers/cli-prov/ssh", { host: "127.0.0.1", port, user: "root" });
    home = await cliHome();
    const adminToken = (await admin.post("/api/v1/tokens", { name: "cli" })).body.token as string;
    const user = await signedInClient(cp.url);
    const userToken = (await user.post("/api/v1/tokens", { name: "cli" })).body.token as string;
    adminEnv = { ...home.env, DOPPIO_URL: cp.url, DOPPIO_TOKEN: adminToken };
    userEnv = { ...home.env, DOPPIO_URL: cp.url, DOPPIO_TOKEN: userToken };
  });
  afterAll(async () => {
    await cp?.close();
    await home?.cleanup();
  });

  it("prepare --follow prints each task as it ends and fails with the play", async () => {
    const r = await home.run(["admin", "servers", "prepare", "cli-prov", "--follow", "--allow-tcg"], {
      env: adminEnv,
    });
    expect(r.code, r.stderr).toBe(1);
    const lines = r.stdout.trim().split("\n");
    expect(lines[0]).toMatch(/^play [0-9a-f-]{36}: prepare on cli-prov \(pending\)$/);
    expect(lines[1]).toMatch(/^unreachable +Gathering Facts/);
    expect(lines.at(-1)).toMatch(
      / prepare {2}failure {2}1\/\d+ {2}ok=0 changed=0 failed=0 skipped=0 unreachable=1 /,
    );
    expect(r.stderr).toContain("the play ended failure: Gathering Facts: ");
  }, 120_000);

  it("plays lists a host's plays, as text and as JSON", async () => {
    const text = await home.run(["admin", "servers", "plays", "cli-prov"], { env: adminEnv });
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(/ prepare {2}failure /);
    const json = await home.run(["admin", "servers", "plays", "cli-prov", "--json"], { env: adminEnv });
    const plays = JSON.parse(json.stdout);
    expect(plays).toHaveLength(1);
    expect(plays[0]).toMatchObject({ server: "cli-prov", playbook: "prepare", status: "failure" });
    expect(plays[0].variables.doppio_agent_token).toBe("[redacted]");
  });

  it("refuses someone who is not the administrator", async () => {
    const r = await home.run(["admin", "servers", "deploy-agent", "cli-prov"], { env: userEnv });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("administrators only");
  });
});
