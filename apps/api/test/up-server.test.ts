import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { heartbeat, TestClient } from "./support/client.ts";
import { startControlPlane, type TestControlPlane } from "./support/control-plane.ts";
import { freePort } from "./support/ports.ts";

/**
 * `make up` and server `local` (scripts/local/stack.ts) against a real control plane: it
 * registers the server when the control plane does not know it (a new or reset database),
 * keeps a token that still works, replaces one that does not, and says "up" only after a
 * heartbeat on that token made the server active. The whole stack: apps/dashboard/test/stack.e2e.test.ts.
 */
describe("make up registers server local whenever the control plane does not know it", () => {
  let data: string;
  let port: number;
  let stack: typeof import("../../../scripts/local/stack.ts");
  let settings: typeof import("../../../scripts/local/settings.ts");
  let cp: TestControlPlane | undefined;

  const start = async () => {
    const passwordFile = path.join(data, "admin-password");
    const secrets = JSON.parse(await readFile(path.join(data, "secrets.json"), "utf8"));
    await writeFile(passwordFile, secrets.adminPassword);
    cp = await startControlPlane({
      config: {
        port,
        publicUrl: settings.API_URL,
        adminEmail: settings.ADMIN_EMAIL,
        adminPasswordFile: passwordFile,
      },
    });
  };
  const register = async () => {
    const { secrets } = stack.loadSecrets();
    const cookie = await stack.adminSession(secrets);
    const how = await stack.ensureServer(secrets, cookie);
    return { how, token: stack.loadSecrets().secrets.agentToken!, cookie };
  };
  const beat = (token: string) => new TestClient(cp!.url, token).post("/agent/v1/heartbeat", heartbeat());

  beforeAll(async () => {
    data = await mkdtemp(path.join(tmpdir(), "doppio-up-server-"));
    port = await freePort();
    // The stack reads where to live and which ports to use when it is first imported.
    process.env.DOPPIO_UP_DATA = data;
    process.env.DOPPIO_UP_API_PORT = String(port);
    settings = await import("../../../scripts/local/settings.ts");
    stack = await import("../../../scripts/local/stack.ts");
    stack.loadSecrets(); // makes the admin password
    await start();
  });
  afterAll(async () => {
    await cp?.close();
    await rm(data, { recursive: true, force: true });
  });

  it("registers, keeps a working token, and registers again after the database is reset", async () => {
    const first = await register();
    expect(first.how).toBe("registered");
    expect((await beat(first.token)).status).toBe(200);
    expect((await register()).how).toBe("kept");

    // The control plane's database goes (a new PGlite directory): the old token means nothing.
    await cp!.close();
    await start();
    expect((await beat(first.token)).status).toBe(401);
    const again = await register();
    expect(again.how).toBe("registered");
    expect(again.token).not.toBe(first.token);
    expect((await beat(again.token)).status).toBe(200);
  }, 180_000);

  it("replaces a token the control plane no longer accepts", async () => {
    const { cookie, token } = await register();
    const admin = new TestClient(cp!.url);
    await admin.request(
      "POST",
      "/api/v1/servers/local/token",
      {},
      { headers: { cookie, origin: settings.API_URL } },
    );
    expect((await beat(token)).status).toBe(401);
    const next = await register();
    expect(next.how).toBe("new token");
    expect((await beat(next.token)).status).toBe(200);
  }, 60_000);

  it("says up only after a heartbeat on its token made the server active", async () => {
    const { cookie, token } = await register();
    const since = Date.now();
    await expect(stack.waitForHeartbeat(cookie, since + 60_000, 1500)).rejects.toThrow(
      /has not reached the control plane as an active server/,
    );
    const waiting = stack.waitForHeartbeat(cookie, since, 30_000);
    await new Promise((r) => setTimeout(r, 300));
    expect((await beat(token)).status).toBe(200);
    await waiting;
  }, 60_000);
});
