import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LinuxHostNetwork } from "../../src/net/host-network.ts";
import { tapNameForIp } from "../../src/net/naming.ts";
import { netnsUnavailable, TestNetns } from "../support/netns.ts";

const missing = netnsUnavailable();
if (missing) console.warn(`SKIPPING host network tests: ${missing}`);

describe.skipIf(missing !== null)("LinuxHostNetwork in a test netns", () => {
  let ns: TestNetns;
  let net: LinuxHostNetwork;

  beforeAll(() => {
    ns = TestNetns.create();
    net = new LinuxHostNetwork({ bridge: "br-devbox", cidr: "10.77.0.0/16", netns: ns.name });
  });
  afterAll(() => ns?.destroy());

  it("creates the bridge with the gateway and one MASQUERADE rule, idempotently", async () => {
    await net.ensureBridge();
    await net.ensureBridge();
    const addr = ns.exec("ip", ["-4", "-o", "addr", "show", "dev", "br-devbox"]);
    expect(addr).toContain("10.77.0.1/16");
    expect(ns.exec("ip", ["-o", "link", "show", "dev", "br-devbox"])).toMatch(/state (UP|UNKNOWN)|<[^>]*UP/);
    const rules = ns.exec("iptables", ["-t", "nat", "-S", "POSTROUTING"]);
    const masq = rules.split("\n").filter((l) => l.includes("MASQUERADE") && l.includes("10.77.0.0/16"));
    expect(masq).toHaveLength(1);
    expect(ns.exec("sysctl", ["-n", "net.ipv4.ip_forward"]).trim()).toBe("1");
  });

  it("creates TAPs on the bridge, lists them, and removes them tolerating repeats", async () => {
    const a = tapNameForIp("10.77.0.2");
    const b = tapNameForIp("10.77.0.3");
    await net.createTap(a);
    await net.createTap(a);
    await net.createTap(b);
    expect((await net.listTaps()).sort()).toEqual([a, b].sort());
    expect(await net.tapMaster(a)).toBe("br-devbox");
    expect(ns.exec("ip", ["-o", "link", "show", "dev", a])).toContain(",UP");
    await net.removeTap(a);
    await net.removeTap(a);
    expect(await net.listTaps()).toEqual([b]);
    await net.removeTap(b);
    expect(await net.listTaps()).toEqual([]);
  });

  it("refuses TAP names it does not own or that exceed 15 characters", async () => {
    await expect(net.createTap("eth0")).rejects.toMatchObject({ code: "invalid_config" });
    await expect(net.createTap("dbx0123456789abcdef")).rejects.toMatchObject({ code: "invalid_config" });
  });
});
