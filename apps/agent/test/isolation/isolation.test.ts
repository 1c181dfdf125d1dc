import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LinuxHostNetwork } from "../../src/net/host-network.ts";
import { macForIp } from "../../src/net/naming.ts";
import { vmmUidRange } from "../../src/vmm/qemu/confine.ts";
import type { QemuExecutor } from "../../src/vmm/qemu/executor.ts";
import {
  boxSpec,
  buildMinimalImage,
  minimalGoldenExecutor,
  qemuUnavailable,
  RecordingReporter,
} from "../qemu/support.ts";
import { TestNetns } from "../support/netns.ts";
import { joinWorld, Listeners, probeFrom } from "./support.ts";

const missing = qemuUnavailable();
if (missing)
  console.warn(`SKIPPING tenant isolation tests: ${missing} (CI runs as root with QEMU and netns)`);

const GW = "10.0.0.1";
const A = "10.0.0.2";
const B = "10.0.0.3";
const UPLINK = "198.51.100.1";
/** "The world": a public address, a private network's host, and the cloud metadata address. */
const PUBLIC = "203.0.113.10";
const PRIVATE = "192.168.77.1";
const CLOUD_METADATA = "169.254.169.254";
/** Where QEMU's user network sits (the reserved golden address); without restrict=on it maps to the host's loopback. */
const SLIRP_HOST = "10.0.255.254";
const METADATA_PORT = 8169;
const EDGE_PORT = 8088;
/** Host services no box may open: the agent's API and a Caddy admin listener. */
const AGENT_PORT = 8090;
const ADMIN_PORT = 2999;

/**
 * Tenant isolation proven from inside real guests (QEMU, minimal image with its probe hook),
 * in test-owned namespaces: "host" holds the bridge, the agent's firewall and the host's
 * services; "world" stands for everything routed beyond the host.
 */
describe.skipIf(missing !== null)("tenant isolation from inside real guests", { timeout: 240_000 }, () => {
  let host: TestNetns;
  let world: TestNetns;
  let listeners: Listeners;
  let ex: QemuExecutor;
  let dataDir: string;

  beforeAll(async () => {
    host = TestNetns.create("dbxi");
    world = TestNetns.create("dbxw");
    listeners = new Listeners();
    dataDir = mkdtempSync(join(tmpdir(), "dbxi-"));
    joinWorld(host, world, [PUBLIC, PRIVATE, CLOUD_METADATA]);
    for (const addr of [PUBLIC, PRIVATE, CLOUD_METADATA]) await listeners.listen(world, addr, 80);
    buildMinimalImage("isolation");
    const network = new LinuxHostNetwork({
      bridge: "br-devbox",
      cidr: "10.0.0.0/16",
      netns: host.name,
      gatewayPorts: [METADATA_PORT],
      hostPorts: [EDGE_PORT],
      vmmUids: vmmUidRange("10.0.0.0/16"),
    });
    await network.ensureBridge();
    // The host's services: on every address (the agent API stand-in, the edge), on the
    // gateway, and on loopback (where user-mode QEMU maps the gateway).
    await listeners.listen(host, "0.0.0.0", AGENT_PORT);
    await listeners.listen(host, "0.0.0.0", EDGE_PORT);
    await listeners.listen(host, GW, METADATA_PORT);
    await listeners.listen(host, GW, ADMIN_PORT);
    await listeners.listen(host, "127.0.0.1", ADMIN_PORT);
    await listeners.listen(host, "127.0.0.1", METADATA_PORT);
    ex = await minimalGoldenExecutor({
      dataDir,
      network,
      netns: host.name,
      imageVersion: "isolation",
      userModeMetadataPort: METADATA_PORT,
    });
  }, 300_000);

  afterAll(async () => {
    if (ex)
      for (const { slug } of await ex.list())
        await ex.remove(slug, new RecordingReporter()).catch(() => undefined);
    listeners?.stop();
    host?.destroy();
    world?.destroy();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  describe("tap mode (production)", () => {
    beforeAll(async () => {
      await Promise.all([
        ex.createFromGolden(boxSpec("box-a", A, 1, { probe: true }), new RecordingReporter()),
        ex.createFromGolden(boxSpec("box-b", B, 1, { probe: true }), new RecordingReporter()),
      ]);
    });

    it("box A reaches the metadata service, the edge and the internet (NAT), and nothing else", () => {
      const allowed = [
        `${GW}:${METADATA_PORT}`,
        `${UPLINK}:${EDGE_PORT}`,
        `${GW}:${EDGE_PORT}`,
        `${PUBLIC}:80`,
      ];
      const denied = [
        `${B}:8000`,
        `${B}:8888`,
        `${GW}:${AGENT_PORT}`,
        `${UPLINK}:${AGENT_PORT}`,
        `${GW}:${ADMIN_PORT}`,
        `${CLOUD_METADATA}:80`,
        `${PRIVATE}:80`,
      ];
      const seen = probeFrom(host, `${A}:8000`, [...allowed, ...denied]);
      expect(seen).toEqual(
        Object.fromEntries([...allowed.map((t) => [t, "open"]), ...denied.map((t) => [t, "closed"])]),
      );
    });

    it("box B is still served to the host's edge side (the probes above were the firewall, not a dead box)", () => {
      expect(host.curl(`http://${B}:8888/`).trim()).toBe("box-b");
      expect(probeFrom(host, `${B}:8000`, [`${GW}:${METADATA_PORT}`])).toEqual({
        [`${GW}:${METADATA_PORT}`]: "open",
      });
    });

    it("a box that forges another box's source IP or MAC gets nothing, not even the metadata service", () => {
      const targets = [`${GW}:${METADATA_PORT}`, `${PUBLIC}:80`];
      const closed = Object.fromEntries(targets.map((t) => [t, "closed"]));
      expect(probeFrom(host, `${A}:8000`, targets, { as: B })).toEqual(closed);
      expect(probeFrom(host, `${A}:8000`, targets, { mac: macForIp(B) })).toEqual(closed);
      // An address outside the box network fails the same way.
      expect(probeFrom(host, `${A}:8000`, targets, { as: "10.0.9.9" })).toEqual(closed);
      // And with its own identity back, the same box is served again.
      expect(probeFrom(host, `${A}:8000`, targets)).toEqual(
        Object.fromEntries(targets.map((t) => [t, "open"])),
      );
    });
  });

  describe("user mode (make up)", () => {
    let http: string;
    let neighbourPort: string;
    let neighbourHttp: string;

    beforeAll(async () => {
      const [a, b] = await Promise.all([
        ex.createFromGolden(
          boxSpec("user-a", "10.0.0.20", 1, { tap: false, probe: true }),
          new RecordingReporter(),
        ),
        ex.createFromGolden(boxSpec("user-b", "10.0.0.21", 1, { tap: false }), new RecordingReporter()),
      ]);
      http = a(8000)!;
      neighbourPort = b(8888)!.split(":")[1]!;
      neighbourHttp = b(8000)!;
    });

    it("the probe hook refuses to run in a box whose owner did not enable it (its site is public)", () => {
      const status = host.exec("curl", [
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        `http://${neighbourHttp}/cgi-bin/probe?to=${PUBLIC}:80`,
      ]);
      expect(status).toBe("403");
    });

    it("the guest reaches the metadata service through its one forward, and no other host port", () => {
      const allowed = [`${GW}:${METADATA_PORT}`];
      const denied = [
        `${GW}:${ADMIN_PORT}`,
        `${GW}:${AGENT_PORT}`,
        `${GW}:${EDGE_PORT}`,
        // The host's loopback through QEMU's own address: Caddy's admin, the metadata
        // service without its forward, the other box's code-server forwarded there.
        `${SLIRP_HOST}:${ADMIN_PORT}`,
        `${SLIRP_HOST}:${METADATA_PORT}`,
        `${SLIRP_HOST}:${neighbourPort}`,
        `${GW}:${neighbourPort}`,
        // The world and the cloud's metadata address.
        `${PUBLIC}:80`,
        `${CLOUD_METADATA}:80`,
        `${PRIVATE}:80`,
      ];
      const seen = probeFrom(host, http, [...allowed, ...denied]);
      expect(seen).toEqual(
        Object.fromEntries([...allowed.map((t) => [t, "open"]), ...denied.map((t) => [t, "closed"])]),
      );
    });
  });
});
