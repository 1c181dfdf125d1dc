import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LinuxHostNetwork } from "../../../src/net/host-network.ts";
import { macForIp, tapNameForIp } from "../../../src/net/naming.ts";
import { QmpClient } from "../../../src/vmm/qemu/qmp.ts";
import { qemuUnavailable } from "../../qemu/support.ts";
import { TestNetns } from "../../support/netns.ts";
import { qemuFacts } from "./qemu-facts.ts";

const why = qemuUnavailable();
if (why) console.warn(`SKIPPING the QEMU host facts test: ${why}`);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * The chaos run's QEMU end checks read a host the way its agent does: this plants, in a
 * namespace of the test's, one box that runs (a qemu-system process started on its box
 * directory's pid file, its TAP and firewall entry made by the agent's own network code)
 * and then each kind of leak, and the gatherer must report exactly those.
 */
describe.skipIf(why !== null)("QEMU host facts (chaos end checks)", () => {
  let ns: TestNetns;
  let dataDir: string;
  let network: LinuxHostNetwork;
  const children: ChildProcess[] = [];
  const host = () => ({ name: "h0", dataDir, netns: ns });

  /** A qemu-system process in the namespace that idles (no machine) with `pidFile`, and QMP at `qmp`. */
  async function qemu(pidFile: string, qmp?: string): Promise<ChildProcess> {
    const child = spawn(
      "ip",
      ["netns", "exec", ns.name, "qemu-system-x86_64", "-machine", "none", "-display", "none"].concat([
        "-monitor",
        "none",
        "-serial",
        "none",
        ...(qmp ? ["-qmp", `unix:${qmp},server=on,wait=off`] : []),
        "-pidfile",
        pidFile,
      ]),
      { stdio: "ignore" },
    );
    children.push(child);
    for (let i = 0; i < 100; i++) {
      try {
        execFileSync("test", ["-s", pidFile]);
        return child;
      } catch {
        await sleep(50);
      }
    }
    throw new Error("qemu did not write its pid file");
  }

  beforeAll(async () => {
    ns = TestNetns.create("dbxf");
    dataDir = mkdtempSync(path.join(tmpdir(), "doppio-facts-"));
    network = new LinuxHostNetwork({ bridge: "br-devbox", cidr: "10.0.0.0/16", netns: ns.name });
    await network.ensureBridge();
    // One running box, as the executor lays it out (vmm/qemu/layout.ts, records.ts).
    const ip = "10.0.0.2";
    const dir = path.join(dataDir, "qemu", "boxes", "alive");
    mkdirSync(dir, { recursive: true });
    writeFileSync(path.join(dir, "overlay.qcow2"), "");
    writeFileSync(
      path.join(dir, "box.json"),
      JSON.stringify({ slug: "alive", tap: tapNameForIp(ip), mac: macForIp(ip), ip }),
    );
    await network.createTap(tapNameForIp(ip), { ip, mac: macForIp(ip) });
    await qemu(path.join(dir, "qemu.pid"), path.join(dir, "qmp.sock"));
  }, 60_000);
  afterAll(() => {
    for (const c of children) {
      try {
        if (c.pid && c.exitCode === null && c.signalCode === null) process.kill(c.pid, "SIGKILL");
      } catch {
        // exited meanwhile; the namespace below must go anyway
      }
    }
    ns?.destroy();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it("a host with only its running box is clean", async () => {
    const facts = await qemuFacts(host(), new Set(["alive"]));
    expect(facts).toEqual({
      vms: { alive: { state: "running" } },
      vmms: 1,
      vmmProblems: [],
      leakProblems: [],
      dataProblems: [],
    });
  });

  it("reports a running box whose VM its QEMU keeps paused (say on a disk that was full)", async () => {
    // QEMU serves one QMP client at a time: each command on its own connection.
    const qmp = async (command: string) => {
      const c = await QmpClient.connect(path.join(dataDir, "qemu", "boxes", "alive", "qmp.sock"), 5_000);
      await c.execute(command).finally(() => c.close());
    };
    await qmp("stop");
    expect((await qemuFacts(host(), new Set(["alive"]))).vmmProblems).toEqual([
      "alive on h0: its VM is paused, not running",
    ]);
    await qmp("cont");
    expect((await qemuFacts(host(), new Set(["alive"]))).vmmProblems).toEqual([]);
  });

  it("reports a box directory of no live box, a leaked TAP, firewall entry and route, and a stray qemu", async () => {
    const facts0 = await qemuFacts(host(), new Set());
    expect(facts0.leakProblems).toEqual([
      expect.stringMatching(/^box directory alive on h0 \(running\) belongs to no live box/),
    ]);

    const ip = "10.0.0.9";
    await network.createTap(tapNameForIp(ip), { ip, mac: macForIp(ip) });
    ns.exec("ip", ["route", "add", "10.0.9.9/32", "dev", tapNameForIp(ip)]);
    ns.exec("ip", ["route", "add", "10.0.8.8/32", "dev", "br-devbox"]);
    const stray = path.join(dataDir, "stray.pid");
    await qemu(stray);
    mkdirSync(path.join(dataDir, "qemu", "boxes", "empty"));
    const facts = await qemuFacts(host(), new Set(["alive", "empty"]));
    expect(facts.leakProblems).toEqual([
      "box directory empty on h0 holds no disks",
      `TAP ${tapNameForIp(ip)} on h0 belongs to no running VM`,
      `firewall entry ${tapNameForIp(ip)} ${macForIp(ip)} ${ip} on h0 belongs to no running VM`,
      `route 10.0.9.9 via TAP ${tapNameForIp(ip)} on h0`,
      expect.stringMatching(/^h0 has extra routes: .*10\.0\.8\.8 dev br-devbox/),
    ]);
    expect(facts.vmms).toBe(2);
    expect(facts.vmmProblems).toEqual([
      expect.stringMatching(/^qemu process \d+ on h0 belongs to no running VM$/),
    ]);
  });

  it("reports a running box whose VMM died, and its TAP then left behind", async () => {
    const alive = children[0]!;
    process.kill(alive.pid!, "SIGKILL");
    await new Promise((r) => alive.once("exit", r));
    await sleep(200);
    const facts = await qemuFacts(host(), new Set(["alive", "empty"]));
    expect(facts.vms.alive).toEqual({ state: "exited" });
    expect(facts.leakProblems).toContain(`TAP ${tapNameForIp("10.0.0.2")} on h0 belongs to no running VM`);
  });
});
