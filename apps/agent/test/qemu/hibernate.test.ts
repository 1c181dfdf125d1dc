import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as delay } from "node:timers/promises";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LinuxHostNetwork } from "../../src/net/host-network.ts";
import { tapNameForIp } from "../../src/net/naming.ts";
import { QemuExecutor } from "../../src/vmm/qemu/executor.ts";
import { hibernationPaths, saveMemory } from "../../src/vmm/qemu/hibernate.ts";
import { boxPaths } from "../../src/vmm/qemu/layout.ts";
import { isVmProcess, readPid } from "../../src/vmm/qemu/process.ts";
import { QmpClient } from "../../src/vmm/qemu/qmp.ts";
import { TestNetns } from "../support/netns.ts";
import {
  boxSpec,
  buildMinimalImage,
  GOLDEN_NET,
  IMAGES_DIR,
  minimalGoldenExecutor,
  qemuUnavailable,
  RecordingReporter,
  removeAllAndClose,
} from "./support.ts";

const missing = qemuUnavailable();
if (missing)
  console.warn(`SKIPPING QEMU hibernate tests: ${missing} (CI must provide root, qemu, iproute2, apt)`);

const SLUG = "hib-a";
const IP = "10.0.0.40";

interface Counter {
  pid: string;
  count: number;
  alive: boolean;
}

describe.skipIf(missing !== null)("hibernate and resume on real QEMU", { timeout: 240_000 }, () => {
  let ns: TestNetns;
  let net: LinuxHostNetwork;
  let ex: QemuExecutor;
  let dataDir: string;
  let generation = 1;
  const timings: Record<string, number> = {};

  const counter = (): Counter => {
    const text = ns.curl(`http://${IP}:8000/cgi-bin/counter`).trim();
    const m = /^pid=(\d*) count=(\d*) alive=(yes|no)$/.exec(text);
    if (!m) throw new Error(`unexpected counter answer: ${text}`);
    return { pid: m[1]!, count: Number(m[2] || 0), alive: m[3] === "yes" };
  };
  const executor = (opts: { hibernateBandwidth?: number } = {}) =>
    new QemuExecutor({
      dataDir,
      imagesDir: IMAGES_DIR,
      network: net,
      netns: ns.name,
      goldenNet: GOLDEN_NET,
      accel: "tcg",
      log: pino({ level: "warn" }),
      ...opts,
    });
  const spec = () => boxSpec(SLUG, IP, generation, { probe: true });

  beforeAll(async () => {
    ns = TestNetns.create();
    dataDir = mkdtempSync(join(tmpdir(), "dbxhib-"));
    buildMinimalImage("test");
    net = new LinuxHostNetwork({ bridge: "br-devbox", cidr: "10.0.0.0/16", netns: ns.name });
    await net.ensureBridge();
    ex = await minimalGoldenExecutor({ dataDir, network: net, netns: ns.name, imageVersion: "test" });
    await ex.createFromGolden(spec(), new RecordingReporter());
  }, 300_000);

  afterAll(async () => {
    console.log("QEMU hibernate timings (ms):", JSON.stringify(timings));
    await removeAllAndClose(ex);
    ns?.destroy();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it("a running process keeps its PID and count across hibernate and a resume by a restarted agent", async () => {
    expect(ns.curl(`http://${IP}:8000/cgi-bin/data`, "kept-while-hibernated").trim()).toBe("stored");
    expect(ns.curl(`http://${IP}:8000/cgi-bin/counter`, "").trim()).toMatch(/alive=yes$/);
    await delay(1_000);
    const before = counter();
    expect(before.alive).toBe(true);
    expect(before.count).toBeGreaterThan(0);
    const vmPid = await readPid(boxPaths(dataDir, SLUG).pid);

    let t = performance.now();
    const { memoryFileBytes } = await ex.hibernate(SLUG, new RecordingReporter());
    timings.hibernateMs = Math.round(performance.now() - t);
    const h = hibernationPaths(boxPaths(dataDir, SLUG));
    expect(memoryFileBytes).toBe(statSync(h.vmstate).size);
    expect(memoryFileBytes).toBeGreaterThan(0);
    expect(existsSync(h.partial)).toBe(false);
    expect(await ex.inspect(SLUG)).toBe("hibernated");
    expect(await ex.memoryFileBytes(SLUG)).toBe(memoryFileBytes);
    expect(await isVmProcess(vmPid!, boxPaths(dataDir, SLUG).dir)).toBe(false);
    expect(await net.listTaps()).not.toContain(tapNameForIp(IP));
    // Hibernating again (a retried job) answers with the same file.
    expect(await ex.hibernate(SLUG, new RecordingReporter())).toEqual({ memoryFileBytes });

    await delay(2_000);
    // The agent restarts: a new executor on the same data dir finds the saved memory.
    const restarted = executor();
    expect(await restarted.inspect(SLUG)).toBe("hibernated");
    generation += 1;
    const report = new RecordingReporter();
    t = performance.now();
    const up = await restarted.start(spec(), report);
    timings.resumeMs = Math.round(performance.now() - t);
    expect(report.steps.map((s) => s.name)).toEqual(["setup_network", "resume_vm", "wait_ready"]);
    expect(up(8000)).toBe(`${IP}:8000`);
    expect(await restarted.inspect(SLUG)).toBe("running");
    // Consumed: the disks move on from here, so that memory must never load again.
    expect(existsSync(h.vmstate)).toBe(false);
    expect(await restarted.memoryFileBytes(SLUG)).toBeNull();

    const after = counter();
    expect(after.pid).toBe(before.pid);
    expect(after.alive).toBe(true);
    expect(after.count).toBeGreaterThanOrEqual(before.count);
    await delay(1_000);
    expect(counter().count).toBeGreaterThan(after.count);

    expect(ns.curl(`http://${IP}:8000/cgi-bin/data`).trim()).toBe("kept-while-hibernated");
    const identity = ns.curl(`http://${IP}:8000/cgi-bin/identity`);
    expect(identity).toContain(`hostname=${SLUG}`);
    // The guest's clock stood still while it was saved; the resume set it again.
    const time = Number(/time=(\d+)/.exec(identity)?.[1]);
    expect(Math.abs(time - Date.now() / 1000)).toBeLessThan(60);
    await restarted.close();
  });

  it("a TCP connection the host held open across hibernate and resume is served on", async () => {
    // Half a request before, the rest after: the guest's socket (in its saved memory) and the
    // host's (kept open) carry on, as after any pause the guest kernel's timers allow.
    const conn = spawn("ip", ["netns", "exec", ns.name, "socat", "-", `TCP:${IP}:8000`], {
      stdio: ["pipe", "pipe", "ignore"],
    });
    let answer = "";
    conn.stdout.on("data", (c: Buffer) => {
      answer += c.toString();
    });
    const ended = new Promise<void>((resolve) => conn.once("close", () => resolve()));
    try {
      conn.stdin.write("GET /cgi-bin/identity HTTP/1.0\r\n");
      await delay(500);
      await ex.hibernate(SLUG, new RecordingReporter());
      generation += 1;
      await ex.start(spec(), new RecordingReporter());
      conn.stdin.write("Host: box\r\n\r\n");
      await Promise.race([ended, delay(30_000)]);
      expect(answer).toMatch(/^HTTP\/1\.[01] 200/);
      expect(answer).toContain(`hostname=${SLUG}`);
    } finally {
      conn.kill();
    }
  });

  it("stop of a hibernated box discards its memory; the next start boots its disks", async () => {
    await ex.hibernate(SLUG, new RecordingReporter());
    expect(await ex.inspect(SLUG)).toBe("hibernated");
    await ex.stop(SLUG, new RecordingReporter());
    expect(await ex.inspect(SLUG)).toBe("stopped");
    expect(existsSync(hibernationPaths(boxPaths(dataDir, SLUG)).vmstate)).toBe(false);
    generation += 1;
    const report = new RecordingReporter();
    await ex.start(spec(), report);
    expect(report.steps.map((s) => s.name)).toContain("boot_vm");
    expect(report.steps.map((s) => s.name)).not.toContain("resume_vm");
    expect(ns.curl(`http://${IP}:8000/cgi-bin/data`).trim()).toBe("kept-while-hibernated");
    // A fresh boot: the counter process is gone with the old memory.
    expect(counter().alive).toBe(false);
  });

  it("kill -9 of the VMM while it saves leaves no resumable file; the box boots from its disks", async () => {
    expect(ns.curl(`http://${IP}:8000/cgi-bin/counter`, "").trim()).toMatch(/alive=yes$/);
    const paths = boxPaths(dataDir, SLUG);
    const h = hibernationPaths(paths);
    const vmPid = await readPid(paths.pid);
    // Throttled, so the stream is still being written when the VMM dies.
    const slow = executor({ hibernateBandwidth: 2 * 1024 * 1024 });
    const hibernating = slow.hibernate(SLUG, new RecordingReporter());
    hibernating.catch(() => undefined);
    for (let i = 0; i < 300 && !existsSync(h.partial); i++) await delay(20);
    expect(existsSync(h.partial)).toBe(true);
    process.kill(vmPid!, "SIGKILL");
    await expect(hibernating).rejects.toMatchObject({ name: "QemuError" });
    expect(await slow.inspect(SLUG)).toBe("exited");
    expect(existsSync(h.vmstate)).toBe(false);
    expect(existsSync(h.partial)).toBe(false);
    expect(await slow.memoryFileBytes(SLUG)).toBeNull();
    generation += 1;
    const report = new RecordingReporter();
    await slow.start(spec(), report);
    expect(report.steps.map((s) => s.name)).toContain("boot_vm");
    expect(ns.curl(`http://${IP}:8000/cgi-bin/data`).trim()).toBe("kept-while-hibernated");
    await slow.close();
  });

  it("a hibernate run again after the agent died once QEMU had saved the memory (the VM left in postmigrate) saves it again", async () => {
    expect(ns.curl(`http://${IP}:8000/cgi-bin/counter`, "").trim()).toMatch(/alive=yes$/);
    const before = counter();
    const paths = boxPaths(dataDir, SLUG);
    // The first run: the memory saved, then the agent gone before it ended the VMM.
    const qmp = await QmpClient.connect(paths.qmp, 2_000);
    try {
      await saveMemory(qmp, paths, () => new Date());
      expect((await qmp.execute<{ status: string }>("query-status")).status).toBe("postmigrate");
    } finally {
      qmp.close();
    }
    // The job resumed by the restarted agent.
    await ex.hibernate(SLUG, new RecordingReporter());
    expect(await ex.inspect(SLUG)).toBe("hibernated");
    generation += 1;
    const report = new RecordingReporter();
    await ex.start(spec(), report);
    expect(report.steps.map((s) => s.name)).toContain("resume_vm");
    const after = counter();
    expect(after.pid).toBe(before.pid);
    expect(after.alive).toBe(true);
  });

  it("only a running box hibernates", async () => {
    await ex.stop(SLUG, new RecordingReporter());
    await expect(ex.hibernate(SLUG, new RecordingReporter())).rejects.toMatchObject({ code: "not_running" });
    expect(await ex.inspect(SLUG)).toBe("stopped");
  });
});
