import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parsePortSet } from "../../src/net/firewall.ts";
import { LinuxHostNetwork } from "../../src/net/host-network.ts";
import { macForIp, tapNameForIp } from "../../src/net/naming.ts";
import { REPO } from "../qemu/support.ts";
import { netnsUnavailable, TestNetns } from "../support/netns.ts";

const missing = netnsUnavailable();
if (missing)
  console.warn(`SKIPPING host network tests: ${missing} (CI runs as root with iproute2 and nftables)`);

const guest = (ip: string) => ({ ip, mac: macForIp(ip) });

describe.skipIf(missing !== null)("LinuxHostNetwork in a test netns", () => {
  let ns: TestNetns;
  let net: LinuxHostNetwork;
  const config = {
    bridge: "br-devbox",
    cidr: "10.77.0.0/16",
    gatewayPorts: [8169],
    hostPorts: [443],
  };

  beforeAll(() => {
    ns = TestNetns.create();
    net = new LinuxHostNetwork({ ...config, netns: ns.name });
  });
  afterAll(() => ns?.destroy());

  const ports = () => parsePortSet(ns.exec("nft", ["-j", "list", "set", "bridge", "doppio", "ports"]));
  const chain = (family: string, name: string) => ns.exec("nft", ["list", "chain", family, "doppio", name]);

  it("creates the bridge, forwarding, NAT and the isolation firewall, idempotently, also when called at once", async () => {
    // The agent's start and its first reconcile pass (one instance), and another process.
    const other = new LinuxHostNetwork({ ...config, netns: ns.name });
    await Promise.all([net.ensureBridge(), net.ensureBridge(), other.ensureBridge()]);
    await net.ensureBridge();
    expect(ns.exec("ip", ["-4", "-o", "addr", "show", "dev", "br-devbox"])).toContain("10.77.0.1/16");
    expect(ns.exec("ip", ["-o", "link", "show", "dev", "br-devbox"])).toMatch(/state (UP|UNKNOWN)|<[^>]*UP/);
    expect(ns.exec("sysctl", ["-n", "net.ipv4.ip_forward"]).trim()).toBe("1");
    const nat = chain("inet", "postrouting");
    expect(nat.match(/masquerade/g)).toHaveLength(1);
    expect(nat).toContain("ip saddr 10.77.0.0/16 ip daddr != 10.77.0.0/16 masquerade");
    const toHost = chain("inet", "box_to_host");
    expect(toHost).toContain("ip daddr 10.77.0.1 tcp dport 8169 accept");
    expect(toHost).toContain("ip daddr != 127.0.0.0/8 tcp dport 443 fib daddr type local accept");
    expect(toHost).toMatch(/drop\s*\n\s*}/);
    expect(chain("inet", "box_out")).toContain("ip daddr @blocked");
    expect(chain("bridge", "forward")).toContain('iifname "dbx*" oifname "dbx*"');
    expect(ns.exec("nft", ["list", "tables"]).trim().split("\n").sort()).toEqual([
      "table bridge doppio",
      "table inet doppio",
    ]);
  });

  it("creates isolated TAPs that may send only as their box, lists and removes them tolerating repeats", async () => {
    const a = tapNameForIp("10.77.0.2");
    const b = tapNameForIp("10.77.0.3");
    await net.createTap(a, guest("10.77.0.2"));
    await net.createTap(a, guest("10.77.0.2"));
    await net.createTap(b, guest("10.77.0.3"));
    expect((await net.listTaps()).sort()).toEqual([a, b].sort());
    expect(await net.tapMaster(a)).toBe("br-devbox");
    expect(ns.exec("ip", ["-o", "link", "show", "dev", a])).toContain(",UP");
    expect(ns.exec("ip", ["-d", "link", "show", "dev", a])).toContain("isolated on");
    expect(ports()).toEqual(
      expect.arrayContaining([
        { tap: a, ...guest("10.77.0.2") },
        { tap: b, ...guest("10.77.0.3") },
      ]),
    );
    expect(ports()).toHaveLength(2);
    await net.removeTap(a);
    await net.removeTap(a);
    expect(await net.listTaps()).toEqual([b]);
    expect(ports()).toEqual([{ tap: b, ...guest("10.77.0.3") }]);
  });

  it("keeps the gateway's MAC while boxes' TAPs come and go", async () => {
    const gatewayMac = () => JSON.parse(ns.exec("ip", ["-j", "link", "show", "dev", "br-devbox"]))[0].address;
    await net.ensureBridge();
    expect(gatewayMac()).toBe(macForIp("10.77.0.1"));
    // A TAP whose host-side MAC sorts below the gateway's: a bridge whose address was never
    // set would take it, and the guests' cached gateway MAC would go nowhere.
    const tap = tapNameForIp("10.77.0.9");
    await net.createTap(tap, guest("10.77.0.9"));
    ns.exec("ip", ["link", "set", "dev", tap, "address", "02:00:00:00:00:01"]);
    expect(gatewayMac()).toBe(macForIp("10.77.0.1"));
    await net.removeTap(tap);
    expect(gatewayMac()).toBe(macForIp("10.77.0.1"));
  });

  it("keeps running boxes' entries across an agent restart, and rewrites a tampered firewall", async () => {
    const b = tapNameForIp("10.77.0.3");
    // Someone (or something) empties the anti-spoofing chain and the input policy.
    ns.exec("nft", ["flush", "chain", "bridge", "doppio", "from_box"]);
    ns.exec("nft", ["flush", "chain", "inet", "doppio", "box_to_host"]);
    const restarted = new LinuxHostNetwork({ ...config, netns: ns.name });
    await restarted.ensureBridge();
    expect(chain("bridge", "from_box")).toContain("@ports accept");
    expect(chain("inet", "box_to_host")).toContain("tcp dport 8169 accept");
    expect(ports()).toEqual([{ tap: b, ...guest("10.77.0.3") }]);
    await restarted.removeTap(b);
    expect(ports()).toEqual([]);
  });

  it("refuses TAP names it does not own or that exceed 15 characters", async () => {
    await expect(net.createTap("eth0", guest("10.77.0.9"))).rejects.toMatchObject({ code: "invalid_config" });
    await expect(net.createTap("dbx0123456789abcdef", guest("10.77.0.9"))).rejects.toMatchObject({
      code: "invalid_config",
    });
  });

  it("`doppio-agent --teardown-network` removes the host's box network the agent config names", async () => {
    await net.ensureBridge();
    await net.createTap(tapNameForIp("10.77.0.5"), guest("10.77.0.5"));
    const dataDir = mkdtempSync(join(tmpdir(), "dbx-teardown-"));
    try {
      execFileSync(
        join(REPO, "node_modules/.bin/tsx"),
        [join(REPO, "apps/agent/src/main.ts"), "--teardown-network"],
        {
          env: {
            ...process.env,
            DOPPIO_AGENT_CONTROL_PLANE_URL: "http://127.0.0.1:9",
            DOPPIO_AGENT_SERVER_TOKEN: "dpa_unused_here",
            DOPPIO_AGENT_API_TOKEN: "unused-here-0123456789",
            DOPPIO_AGENT_DATA_DIR: dataDir,
            DOPPIO_AGENT_DOMAIN: "test",
            DOPPIO_AGENT_NETNS: ns.name,
            DOPPIO_AGENT_CIDR: config.cidr,
            DOPPIO_AGENT_LOG_LEVEL: "warn",
          },
          timeout: 60_000,
        },
      );
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
    expect(ns.exec("ip", ["-o", "link", "show"])).not.toContain("br-devbox");
    expect(ns.exec("nft", ["list", "tables"]).trim()).toBe("");
  });

  it("teardown leaves no TAP, bridge or firewall table behind", async () => {
    const agent = new LinuxHostNetwork({ ...config, netns: ns.name });
    await agent.ensureBridge();
    await agent.createTap(tapNameForIp("10.77.0.4"), guest("10.77.0.4"));
    await agent.teardown();
    await agent.teardown();
    expect(await agent.listTaps()).toEqual([]);
    expect(ns.exec("ip", ["-o", "link", "show"])).not.toContain("br-devbox");
    expect(ns.exec("nft", ["list", "tables"]).trim()).toBe("");
  });
});
