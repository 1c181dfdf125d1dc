import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { heartbeat, registerServer, signedInClient, type TestClient } from "../../api/test/support/client.ts";
import { startControlPlane, type TestControlPlane } from "../../api/test/support/control-plane.ts";
import { buildCli, type CliHome, cliHome } from "./support/cli.ts";

/**
 * `doppio admin servers` (the list, with each host's warm pool per template) and
 * `doppio admin servers warm-pool NAME TEMPLATE SIZE`, the built CLI against a real control
 * plane whose hosts report their pools through the agent heartbeat.
 */
describe("doppio admin servers: warm pools", () => {
  let cp: TestControlPlane;
  let home: CliHome;
  let admin: TestClient;
  let host: TestClient;
  let adminEnv: NodeJS.ProcessEnv;
  let userEnv: NodeJS.ProcessEnv;

  beforeAll(async () => {
    [cp] = await Promise.all([startControlPlane(), buildCli()]);
    admin = await cp.admin();
    host = await registerServer(admin, "pool-host");
    await registerServer(admin, "bare-host");
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

  const pools = async () => (await admin.get("/api/v1/servers/pool-host")).body.warmPool;

  it("lists each host's pool per template: size set (or the agent's own), ready and filling", async () => {
    // The agent's own configuration (no size set here) aims at 2 code clones; none set for minimal yet.
    await host.post(
      "/agent/v1/heartbeat",
      heartbeat(
        { minimal: "ready" },
        {
          pool: [
            { template: "code", target: 2, ready: 1, filling: 1 },
            { template: "minimal", target: 0, ready: 0, filling: 0 },
          ],
        },
      ),
    );
    const r = await home.run(["admin", "servers", "warm-pool", "pool-host", "minimal", "3"], {
      env: adminEnv,
    });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe(
      "warm pool of minimal on pool-host: size 3 (as last reported: 0 ready, 0 filling)\n",
    );
    await host.post(
      "/agent/v1/heartbeat",
      heartbeat(
        { minimal: "ready" },
        {
          pool: [
            { template: "code", target: 2, ready: 1, filling: 1 },
            { template: "minimal", target: 3, ready: 2, filling: 1 },
          ],
        },
      ),
    );

    const list = await home.run(["admin", "servers"], { env: adminEnv });
    expect(list.code, list.stderr).toBe(0);
    const lines = list.stdout.trimEnd().split("\n");
    expect(lines[0]).toMatch(/^SERVER +STATUS +HEARTBEAT +POOL +SIZE +READY +FILLING$/);
    const cells = (l: string) => l.split(/ {2,}/);
    expect(lines.slice(1).map(cells)).toEqual([
      ["bare-host", "active", "never", "-", "-", "-", "-"],
      ["pool-host", "active", expect.stringMatching(/ago$/), "code", "2 (agent config)", "1", "1"],
      ["pool-host", "active", expect.stringMatching(/ago$/), "minimal", "3", "2", "1"],
    ]);
    // `list` names the same thing, and --json prints the API's servers.
    const json = await home.run(["admin", "servers", "list", "--json"], { env: adminEnv });
    const servers = JSON.parse(json.stdout);
    expect(servers.find((s: { name: string }) => s.name === "pool-host").warmPool).toEqual(await pools());
  });

  it("0 empties a pool", async () => {
    const r = await home.run(["admin", "servers", "warm-pool", "pool-host", "minimal", "0"], {
      env: adminEnv,
    });
    expect(r.code, r.stderr).toBe(0);
    expect((await pools()).find((p: { template: string }) => p.template === "minimal").size).toBe(0);
  });

  it("refuses bad input with a clear error and changes nothing", async () => {
    const before = await pools();
    const run = (...args: string[]) =>
      home.run(["admin", "servers", "warm-pool", ...args], { env: adminEnv });

    for (const size of ["-1", "33", "1.5", "three", "1e1"]) {
      const r = await run("pool-host", "minimal", size);
      expect(r.code, size).toBe(2);
      expect(r.stderr).toContain(`invalid pool size "${size}": a whole number from 0 to 32`);
    }
    const server = await run("no-such-host", "minimal", "1");
    expect(server.code).toBe(1);
    expect(server.stderr).toContain('server "no-such-host"');
    expect(server.stderr).toContain("not found");
    expect(server.stderr).toContain("doppio admin servers");
    const template = await run("pool-host", "no-such-template", "1");
    expect(template.code).toBe(2);
    expect(template.stderr).toContain('unknown template "no-such-template"');
    expect(template.stderr).toContain("doppio templates");
    const missing = await run("pool-host", "minimal");
    expect(missing.code).not.toBe(0);
    expect(missing.stderr).toContain("missing required argument 'size'");

    expect(await pools()).toEqual(before);
  });

  it("refuses someone who is not the administrator, for the list and for a size", async () => {
    const list = await home.run(["admin", "servers"], { env: userEnv });
    expect(list.code).toBe(1);
    expect(list.stderr).toContain("administrators only");
    const set = await home.run(["admin", "servers", "warm-pool", "pool-host", "minimal", "5"], {
      env: userEnv,
    });
    expect(set.code).toBe(1);
    expect(set.stderr).toContain("administrators only");
    expect((await pools()).find((p: { template: string }) => p.template === "minimal").size).toBe(0);
  });
});
