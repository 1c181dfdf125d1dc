import { execFileSync, spawnSync } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { addPortScript, BOX_TO_HOST_CONNECTIONS, BOX_TO_HOST_RATE } from "../../src/net/firewall.ts";
import { LinuxHostNetwork } from "../../src/net/host-network.ts";
import { vmmUidRange } from "../../src/vmm/qemu/confine.ts";
import { netnsUnavailable, TestNetns } from "../support/netns.ts";

const missing = netnsUnavailable();
if (missing) console.warn(`SKIPPING box traffic limits: ${missing} (CI runs as root with iproute2 and nft)`);

const GATEWAY = "10.78.0.1";
const BOX_IP = "10.78.0.5";
const PORT = 8169;

/** Node code run in a namespace: prints one JSON line and exits. */
function nodeIn(ns: TestNetns, code: string, timeoutMs = 60_000): any {
  return JSON.parse(ns.exec(process.execPath, ["-e", code], timeoutMs).trim().split("\n").at(-1)!);
}

/**
 * The host firewall's bounds on boxes (net/firewall.ts), on a real bridge and nftables in a
 * test namespace: a "box" namespace sends through a veth that the firewall knows as a box's
 * TAP (its name, MAC and address in the `ports` set), to a server on the gateway's metadata
 * port that holds every connection it accepts; and the host's side connects to a server in
 * the box as root, as another user and as boxes' VMM uids.
 */
describe.skipIf(missing !== null)("what boxes and their VMMs may open (nftables)", () => {
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
      vmmUids: vmmUidRange("10.78.0.0/16"),
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

  it("lets no VMM uid open a connection out of the host, to a box or beyond; root (the edge) and other users still reach the box", async () => {
    const { spawn } = await import("node:child_process");
    const boxServer = spawn(
      "ip",
      [
        "netns",
        "exec",
        box.name,
        process.execPath,
        "-e",
        `require("node:net").createServer((c) => c.end("box\\n")).listen(8000, "${BOX_IP}", () => console.log("up"));`,
      ],
      { stdio: ["ignore", "pipe", "inherit"] },
    );
    try {
      await new Promise<void>((resolve) => boxServer.stdout!.once("data", () => resolve()));
      const { first, last } = vmmUidRange("10.78.0.0/16");
      const connectAs = (uid: number | null) => {
        const curl = ["curl", "-sS", "--max-time", "2", `telnet://${BOX_IP}:8000`];
        const argv =
          uid === null ? curl : ["setpriv", `--reuid=${uid}`, `--regid=${uid}`, "--clear-groups", ...curl];
        const r = spawnSync("ip", ["netns", "exec", host.name, ...argv], { encoding: "utf8", input: "" });
        return r.stdout.trim() === "box" ? "reached" : "blocked";
      };
      expect(connectAs(null)).toBe("reached");
      expect(connectAs(65534)).toBe("reached"); // nobody: not a VMM
      for (const uid of [first, first + 5, last]) expect(connectAs(uid), String(uid)).toBe("blocked");
      expect(connectAs(last + 1)).toBe("reached");
    } finally {
      boxServer.kill("SIGKILL");
    }
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
