import { execFileSync } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { addPortScript, BOX_TO_HOST_CONNECTIONS, BOX_TO_HOST_RATE } from "../../src/net/firewall.ts";
import { LinuxHostNetwork } from "../../src/net/host-network.ts";
import { netnsUnavailable, TestNetns } from "../support/netns.ts";

const missing = netnsUnavailable();
if (missing)
  console.warn(`SKIPPING box → host connection limits: ${missing} (CI runs as root with iproute2 and nft)`);

const GATEWAY = "10.78.0.1";
const BOX_IP = "10.78.0.5";
const PORT = 8169;

/** Node code run in a namespace: prints one JSON line and exits. */
function nodeIn(ns: TestNetns, code: string, timeoutMs = 60_000): any {
  return JSON.parse(ns.exec(process.execPath, ["-e", code], timeoutMs).trim().split("\n").at(-1)!);
}

/**
 * The host firewall's per-box bounds on connections into the host (net/firewall.ts), on a
 * real bridge and nftables in a test namespace: a "box" namespace sends through a veth that
 * the firewall knows as a box's TAP (its name, MAC and address in the `ports` set), to a
 * server on the gateway's metadata port that holds every connection it accepts.
 */
describe.skipIf(missing !== null)("box → host connection limits (nftables)", () => {
  let host: TestNetns;
  let box: TestNetns;
  let server: ReturnType<typeof import("node:child_process").spawn> | undefined;

  beforeAll(async () => {
    host = TestNetns.create("dbxl");
    box = TestNetns.create("dbxb");
    const net = new LinuxHostNetwork({
      bridge: "br-devbox",
      cidr: "10.78.0.0/16",
      gatewayPorts: [PORT],
      hostPorts: [],
      netns: host.name,
    });
    await net.ensureBridge();
    host.exec("ip", ["link", "add", "dbxveth1", "type", "veth", "peer", "name", "eth0", "netns", box.name]);
    host.exec("ip", ["link", "set", "dbxveth1", "master", "br-devbox", "up"]);
    box.exec("ip", ["addr", "add", `${BOX_IP}/16`, "dev", "eth0"]);
    box.exec("ip", ["link", "set", "eth0", "up"]);
    const mac = box.exec("cat", ["/sys/class/net/eth0/address"]).trim();
    execFileSync("ip", ["netns", "exec", host.name, "nft", "-f", "-"], {
      input: addPortScript({ tap: "dbxveth1", mac, ip: BOX_IP }),
    });
    const { spawn } = await import("node:child_process");
    server = spawn(
      "ip",
      [
        "netns",
        "exec",
        host.name,
        process.execPath,
        "-e",
        `const held = []; require("node:net").createServer((c) => { held.push(c); c.on("error", () => {}); })
          .listen(${PORT}, "${GATEWAY}", () => console.log("listening"));`,
      ],
      { stdio: ["ignore", "pipe", "inherit"] },
    );
    await new Promise<void>((resolve) => server!.stdout!.once("data", () => resolve()));
  }, 60_000);

  afterAll(() => {
    server?.kill("SIGKILL");
    box?.destroy();
    host?.destroy();
  });

  it(`holds a box to ${BOX_TO_HOST_CONNECTIONS} open connections into the host; the rest are reset at once`, () => {
    const result = nodeIn(
      box,
      `const net = require("node:net");
       const tries = Array.from({ length: ${BOX_TO_HOST_CONNECTIONS + 8} }, () => new Promise((resolve) => {
         const s = net.connect(${PORT}, "${GATEWAY}");
         s.once("connect", () => resolve(["open", s]));
         s.once("error", (e) => resolve([e.code, s]));
       }));
       Promise.all(tries).then((r) => {
         const codes = r.map(([c]) => c);
         console.log(JSON.stringify({ open: codes.filter((c) => c === "open").length, refused: codes.filter((c) => c === "ECONNREFUSED" || c === "ECONNRESET").length }));
         for (const [, s] of r) s.destroy();
         process.exit(0);
       });`,
    );
    expect(result).toEqual({ open: BOX_TO_HOST_CONNECTIONS, refused: 8 });
  });

  it(`holds a box to ${BOX_TO_HOST_RATE.perSecond} new connections a second after a burst of ${BOX_TO_HOST_RATE.burst}`, () => {
    // The count of the test before drains as its connections close.
    const attempts = 200;
    const result = nodeIn(
      box,
      `const net = require("node:net");
       const started = process.hrtime.bigint();
       let open = 0;
       (async () => {
         for (let i = 0; i < ${attempts}; i++) {
           open += await new Promise((resolve) => {
             const s = net.connect(${PORT}, "${GATEWAY}");
             s.once("connect", () => { s.destroy(); resolve(1); });
             s.once("error", () => resolve(0));
           });
         }
         console.log(JSON.stringify({ open, seconds: Number(process.hrtime.bigint() - started) / 1e9 }));
       })();`,
    );
    // Sequential, one open at a time: only the rate can refuse them.
    expect(result.seconds).toBeLessThan((attempts - BOX_TO_HOST_RATE.burst) / BOX_TO_HOST_RATE.perSecond);
    expect(result.open).toBeGreaterThanOrEqual(BOX_TO_HOST_RATE.burst - BOX_TO_HOST_CONNECTIONS);
    expect(result.open).toBeLessThanOrEqual(
      BOX_TO_HOST_RATE.burst + Math.ceil(BOX_TO_HOST_RATE.perSecond * result.seconds) + 1,
    );
  });
});
