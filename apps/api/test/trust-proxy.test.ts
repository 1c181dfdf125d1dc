import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadConfig } from "../src/config.ts";
import { TestClient } from "./support/client.ts";
import { startControlPlane, type TestControlPlane } from "./support/control-plane.ts";

/** Login attempts with a wrong password, each with the given X-Forwarded-For; their statuses. */
async function attempts(url: string, forwardedFor: string[]): Promise<number[]> {
  const statuses: number[] = [];
  for (const xff of forwardedFor) {
    const res = await new TestClient(url).request(
      "POST",
      "/api/v1/auth/login",
      { email: "nobody@example.com", password: "not the password" },
      { headers: { "x-forwarded-for": xff } },
    );
    statuses.push(res.status);
  }
  return statuses;
}

/**
 * Login limits key on the client address. Without a trusted proxy (the default) that is the
 * connection's address, whatever X-Forwarded-For says; with one, the address the proxy adds.
 */
describe("trustProxy and the client address login limits key on", () => {
  describe("no trusted proxy (default)", () => {
    let env: TestControlPlane;
    beforeAll(async () => {
      env = await startControlPlane({ config: { authRateLimitPerMinute: 2 } });
    });
    afterAll(() => env?.close());

    it("ignores a client's made-up X-Forwarded-For: new values each time do not dodge the limit", async () => {
      const statuses = await attempts(env.url, ["198.51.100.1", "198.51.100.2", "198.51.100.3"]);
      expect(statuses).toEqual([401, 401, 429]);
    });
  });

  describe("loopback is a trusted proxy", () => {
    let env: TestControlPlane;
    beforeAll(async () => {
      env = await startControlPlane({ config: { authRateLimitPerMinute: 2, trustProxy: ["127.0.0.0/8"] } });
    });
    afterAll(() => env?.close());

    it("limits each client address the proxy reports on its own", async () => {
      expect(await attempts(env.url, ["203.0.113.7", "203.0.113.7", "203.0.113.7"])).toEqual([401, 401, 429]);
      // Another client behind the same proxy still gets its own attempts.
      expect(await attempts(env.url, ["203.0.113.8"])).toEqual([401]);
    });

    it("keys on the address the proxy added, not on what the client put before it", async () => {
      // The proxy appends the real client (203.0.113.9) to whatever the client sent.
      const spoofed = ["10.1.1.1, 203.0.113.9", "10.2.2.2, 203.0.113.9", "10.3.3.3, 203.0.113.9"];
      expect(await attempts(env.url, spoofed)).toEqual([401, 401, 429]);
    });
  });

  it("reads the proxies from DOPPIO_TRUST_PROXY (comma-separated) and refuses what is not an address", () => {
    expect(loadConfig({ DOPPIO_TRUST_PROXY: "10.0.0.0/8, 127.0.0.1,fd00::/8" }).trustProxy).toEqual([
      "10.0.0.0/8",
      "127.0.0.1",
      "fd00::/8",
    ]);
    expect(loadConfig({}).trustProxy).toEqual([]);
    for (const bad of ["10.0.0.0/33", "example.com", "10.0.0.1/8/1", "true"]) {
      expect(() => loadConfig({ DOPPIO_TRUST_PROXY: bad }), bad).toThrow(/trustProxy/);
    }
  });
});
