import { pino } from "pino";
import { describe, expect, it } from "vitest";
import { cidrProblem, numToIp, poolLayout } from "../src/cidr.ts";
import { parseConfig } from "../src/config.ts";
import { createBackend } from "../src/main.ts";
import { LinuxHostNetwork } from "../src/net/host-network.ts";

const config = {
  controlPlaneUrl: "http://127.0.0.1:9",
  serverToken: "dpa_test_token",
  dataDir: "/tmp/doppio-cidr-test",
  domain: "example.test",
  apiToken: "x".repeat(32),
};

// QEMU user mode's own addresses on the same layout: qemu/pure.test.ts.
describe("the box network layout (cidr.ts), one rule for every part that uses it", () => {
  it("lays a /29, the smallest network, out the same for the pool, the bridge and the backends", async () => {
    const l = poolLayout("192.168.7.3/29");
    expect([l.network, l.gateway, l.first, l.last, l.golden, l.broadcast].map((n) => numToIp(n))).toEqual([
      "192.168.7.0",
      "192.168.7.1",
      "192.168.7.2",
      "192.168.7.5",
      "192.168.7.6",
      "192.168.7.7",
    ]);
    expect(l.cidr).toBe("192.168.7.0/29");

    const bridge = new LinuxHostNetwork({ bridge: "br-test", cidr: "192.168.7.3/29" });
    expect([bridge.cidr, bridge.gateway, bridge.prefix]).toEqual(["192.168.7.0/29", "192.168.7.1", 29]);

    const backend = await createBackend(
      parseConfig({ ...config, bridge: { name: "br-test", cidr: "192.168.7.0/29" } }),
      pino({ level: "silent" }),
    );
    expect(backend.network).toMatchObject({ gateway: "192.168.7.1", prefix: 29 });
    await backend.executor.close();
  });

  it("refuses a /30 (no box address would be left) in the config, the pool and the bridge", () => {
    expect(cidrProblem("10.0.0.0/30")).toMatch(/between \/8 and \/29/);
    expect(cidrProblem("10.0.0.0/29")).toBeNull();
    expect(cidrProblem("10.0.0.0/8")).toBeNull();
    expect(cidrProblem("10.0.0.0/7")).not.toBeNull();
    expect(() => parseConfig({ ...config, bridge: { cidr: "10.0.0.0/30" } })).toThrow(/between \/8 and \/29/);
    expect(() => poolLayout("10.0.0.0/30")).toThrow(/between \/8 and \/29/);
    expect(() => new LinuxHostNetwork({ bridge: "br-test", cidr: "10.0.0.0/30" })).toThrow(
      expect.objectContaining({
        code: "invalid_config",
        message: expect.stringMatching(/between \/8 and \/29/),
      }),
    );
  });
});
