import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { LinuxHostNetwork } from "../../src/net/host-network.ts";
import { macForIp, tapNameForIp } from "../../src/net/naming.ts";
import { QemuExecutor } from "../../src/vmm/qemu/executor.ts";
import { vmStatus } from "../../src/vmm/qemu/io-pause.ts";
import { boxPaths } from "../../src/vmm/qemu/layout.ts";
import { readPid } from "../../src/vmm/qemu/process.ts";
import { QmpClient } from "../../src/vmm/qemu/qmp.ts";
import { TestNetns } from "../support/netns.ts";
import {
  boxSpec,
  buildMinimalImage,
  GOLDEN_NET,
  IMAGES_DIR,
  qemuUnavailable,
  REPO,
  RecordingReporter,
  removeAllAndClose,
} from "./support.ts";

const missing = qemuUnavailable();
if (missing)
  console.warn(`SKIPPING QEMU executor tests: ${missing} (CI must provide root, qemu, iproute2, apt)`);

describe.skipIf(missing !== null)("QemuExecutor on real QEMU in a test netns", { timeout: 180_000 }, () => {
  let ns: TestNetns;
  let net: LinuxHostNetwork;
  let ex: QemuExecutor;
  let dataDir: string;
  const timings: Record<string, number> = {};

  beforeAll(async () => {
    ns = TestNetns.create();
    dataDir = mkdtempSync(join(tmpdir(), "dbxq-"));
    let t = performance.now();
    buildMinimalImage("test");
    timings.imageBuildOrCheckMs = Math.round(performance.now() - t);
    net = new LinuxHostNetwork({ bridge: "br-devbox", cidr: "10.0.0.0/16", netns: ns.name });
    await net.ensureBridge();
    ex = new QemuExecutor({
      dataDir,
      imagesDir: IMAGES_DIR,
      network: net,
      netns: ns.name,
      goldenNet: GOLDEN_NET,
      accel: "auto",
      // The KVM probe verdict is per host: keep it across test runs.
      accelCacheFile: join(REPO, ".data", "qemu-accel.json"),
      // Forwarded in user mode on top of the template's readyPorts (from the golden manifest).
      userModePorts: [9000],
      log: pino({ level: "warn" }),
    });
    t = performance.now();
    const info = await ex.buildGolden(
      {
        name: "minimal",
        version: "cp-1",
        imageVersion: "test",
        readyPorts: [8000, 8888],
        memoryMb: 256,
        vcpu: 1,
      },
      new RecordingReporter(),
    );
    timings.goldenBuildMs = Math.round(performance.now() - t);
    expect(info.status).toBe("ready");
  }, 240_000);

  afterAll(async () => {
    console.log("QEMU test timings (ms):", JSON.stringify(timings));
    await removeAllAndClose(ex);
    ns?.destroy();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it("reports the golden snapshot as ready", async () => {
    const g = await ex.goldenStatus("minimal");
    expect(g).toMatchObject({ template: "minimal", version: "cp-1", status: "ready", imageVersion: "test" });
    expect((await ex.goldenStatus("nothing-here")).status).toBe("missing");
  });

  it("restores three clones concurrently, each with its own IP, MAC and slug on :8000 and :8888", async () => {
    const clones = [
      ["clone-a", "10.0.0.2"],
      ["clone-b", "10.0.0.3"],
      ["clone-c", "10.0.0.4"],
    ] as const;
    const t = performance.now();
    const ups = await Promise.all(
      clones.map(([slug, ip]) => ex.createFromGolden(boxSpec(slug, ip), new RecordingReporter())),
    );
    timings.threeConcurrentRestoresMs = Math.round(performance.now() - t);
    for (const [i, [slug, ip]] of clones.entries()) {
      expect(ups[i]!(8000)).toBe(`${ip}:8000`);
      expect(ns.curl(`http://${ip}:8000/`).trim()).toBe(slug);
      expect(ns.curl(`http://${ip}:8888/`).trim()).toBe(slug);
      // The neighbour entry the bridge side learned is the MAC the guest set for itself.
      const neigh = ns.exec("ip", ["neigh", "show", ip, "dev", "br-devbox"]);
      expect(neigh).toContain(`lladdr ${macForIp(ip)}`);
      expect(await ex.inspect(slug)).toBe("running");
      expect(await net.tapMaster(tapNameForIp(ip))).toBe("br-devbox");
    }
    expect(new Set(clones.map(([, ip]) => macForIp(ip))).size).toBe(3);
  });

  it("each clone applied its own identity: hostname, MAC, machine-id, env, clock and data disk", async () => {
    const seen = new Set<string>();
    for (const [slug, ip] of [
      ["clone-a", "10.0.0.2"],
      ["clone-b", "10.0.0.3"],
      ["clone-c", "10.0.0.4"],
    ] as const) {
      const id = Object.fromEntries(
        ns
          .curl(`http://${ip}:8000/cgi-bin/identity`)
          .trim()
          .split("\n")
          .map((l) => l.split("=", 2) as [string, string]),
      );
      expect(id.hostname).toBe(slug);
      expect(id.mac).toBe(macForIp(ip));
      expect(id.greeting).toBe("it's a box");
      expect(id.machine_id).toMatch(/^[0-9a-f]{32}$/);
      seen.add(String(id.machine_id));
      // The golden snapshot's clock is stale; the clone set its clock from issued_at.
      expect(Math.abs(Number(id.time) - Date.now() / 1000)).toBeLessThan(120);
      // Its address replaced the golden's (none left beside it), with the default route.
      expect(String(id.inet).trim()).toBe(`${ip}/16`);
      expect(String(id.route).trim()).toMatch(/^default via 10\.0\.0\.1 dev eth0\b/);
      // /data is the clone's own 1 GiB volume, not the golden's 1 MiB placeholder, and its
      // kernel learned the size from the block_resize before the resume (launch.ts), without
      // the apply's slower re-probe of the disk.
      expect(Number(id.data_bytes)).toBe(1024 ** 3);
      expect(readFileSync(ex.serialLogPath(slug)!, "utf8")).not.toContain("re-probing");
    }
    expect(seen.size).toBe(3);
  });

  it("a clone sets its clock from the metadata's issued_at (right after READY)", async () => {
    const spec = boxSpec("clone-t", "10.0.0.9");
    // A day ahead: a clock there comes from the metadata, not from the golden's snapshot.
    const ahead = Date.now() + 86_400_000;
    spec.metadata.issued_at = ahead;
    await ex.createFromGolden(spec, new RecordingReporter());
    try {
      const clock = () =>
        Number(/^time=(\d+)$/m.exec(ns.curl("http://10.0.0.9:8000/cgi-bin/identity"))?.[1] ?? 0);
      // `date` runs just after READY: poll for it, 20 s at most.
      let time = clock();
      for (let i = 0; i < 100 && Math.abs(time - ahead / 1000) > 120; i++) {
        await new Promise((r) => setTimeout(r, 200));
        time = clock();
      }
      expect(Math.abs(time - ahead / 1000)).toBeLessThan(120);
    } finally {
      await ex.remove("clone-t", new RecordingReporter());
    }
  });

  /** Another agent's executor on the same data dir (no volume pool of its own). */
  const restartedAgent = () =>
    new QemuExecutor({
      dataDir,
      imagesDir: IMAGES_DIR,
      network: net,
      netns: ns.name,
      goldenNet: GOLDEN_NET,
      accel: "tcg",
      volumePoolPerSize: 0,
      log: pino({ level: "warn" }),
    });

  it("a restarted agent (new executor on the same data dir) re-attaches to running VMs", async () => {
    const again = restartedAgent();
    expect(await again.inspect("clone-a")).toBe("running");
    expect((await again.upstream("clone-a"))?.(8888)).toBe("10.0.0.2:8888");
    expect((await again.list()).map((b) => b.slug).sort()).toEqual(["clone-a", "clone-b", "clone-c"]);
    await again.close();
  });

  it("create is idempotent: a second create of a running box changes nothing", async () => {
    const pid = await readPid(boxPaths(dataDir, "clone-a").pid);
    await ex.createFromGolden(boxSpec("clone-a", "10.0.0.2"), new RecordingReporter());
    expect(await readPid(boxPaths(dataDir, "clone-a").pid)).toBe(pid);
  });

  it("keeps /data across stop and start (cold boot from overlay + volume)", async () => {
    expect(ns.curl("http://10.0.0.2:8000/cgi-bin/data", "survives-restart").trim()).toBe("stored");
    await ex.stop("clone-a", new RecordingReporter());
    expect(await ex.inspect("clone-a")).toBe("stopped");
    expect(await net.listTaps()).not.toContain(tapNameForIp("10.0.0.2"));
    await ex.stop("clone-a", new RecordingReporter());
    const t = performance.now();
    await ex.start(boxSpec("clone-a", "10.0.0.2", 2), new RecordingReporter());
    timings.coldBootStartMs = Math.round(performance.now() - t);
    expect(await ex.inspect("clone-a")).toBe("running");
    expect(ns.curl("http://10.0.0.2:8000/cgi-bin/data").trim()).toBe("survives-restart");
    expect(ns.curl("http://10.0.0.2:8888/").trim()).toBe("clone-a");
  });

  it("a start cut off by an agent restart during wait_ready is finished by the next agent: it waits for the guest's READY", async () => {
    // Two agents on one data dir, one after the other: the first dies (its job never
    // returns) just as its start waits for the guest; the second re-runs the start.
    const [first, second] = [restartedAgent(), restartedAgent()];
    await first.createFromGolden(boxSpec("cut-boot", "10.0.0.9"), new RecordingReporter());
    await first.stop("cut-boot", new RecordingReporter());
    let cut!: () => void;
    const reachedReady = new Promise<void>((resolve) => {
      cut = resolve;
    });
    const dies = new (class extends RecordingReporter {
      override step<T>(name: Parameters<RecordingReporter["step"]>[0], fn: () => Promise<T>): Promise<T> {
        if (name !== "wait_ready") return super.step(name, fn);
        cut();
        return new Promise<T>(() => {});
      }
    })();
    void first.start(boxSpec("cut-boot", "10.0.0.9", 2), dies);
    await reachedReady;
    expect(dies.steps.map((s) => s.name)).toContain("boot_vm");
    expect(await second.inspect("cut-boot")).toBe("running");

    const rerun = new RecordingReporter();
    const up = await second.start(boxSpec("cut-boot", "10.0.0.9", 3), rerun);
    expect(rerun.steps.map((s) => s.name)).toEqual(["wait_ready"]);
    expect(up(8000)).toBe("10.0.0.9:8000");
    // Answering as itself the moment the start returns: the guest was ready, not booting.
    expect(ns.curl("http://10.0.0.9:8000/").trim()).toBe("cut-boot");
    // Ready is recorded: a further start adopts the box without waiting again.
    const again = new RecordingReporter();
    await second.start(boxSpec("cut-boot", "10.0.0.9", 3), again);
    expect(again.steps).toEqual([]);
    // The first agent's lock on the box never ends; the second removes it.
    await second.remove("cut-boot", new RecordingReporter());
  });

  it("a resume cut off before its VM ran (the agent died before `cont`) is launched again by the next agent", async () => {
    const [first, second] = [restartedAgent(), restartedAgent()];
    await first.createFromGolden(boxSpec("cut-load", "10.0.0.11"), new RecordingReporter());
    expect(ns.curl("http://10.0.0.11:8000/cgi-bin/data", "kept-on-disk").trim()).toBe("stored");
    await first.hibernate("cut-load", new RecordingReporter());
    // The first agent dies just as it would let the loaded VM run: its QMP connection ends
    // (as a killed process's does) and `cont` is never sent.
    let atCont!: () => void;
    const reachedCont = new Promise<void>((resolve) => {
      atCont = resolve;
    });
    const execute = QmpClient.prototype.execute;
    const spy = vi.spyOn(QmpClient.prototype, "execute").mockImplementation(function (
      this: QmpClient,
      command: string,
      args?: Record<string, unknown>,
      timeoutMs?: number,
    ) {
      if (command !== "cont") return execute.call(this, command, args, timeoutMs);
      this.close();
      atCont();
      return new Promise(() => {});
    } as typeof execute);
    void first.start(boxSpec("cut-load", "10.0.0.11", 2), new RecordingReporter());
    await reachedCont;
    spy.mockRestore();
    const paths = boxPaths(dataDir, "cut-load");
    const stuckPid = await readPid(paths.pid);
    expect(await vmStatus(paths.qmp)).not.toBe("running");

    const said: string[] = [];
    const rerun = new (class extends RecordingReporter {
      override log(line: string): void {
        said.push(line);
      }
    })();
    await second.start(boxSpec("cut-load", "10.0.0.11", 3), rerun);
    expect(said.join("\n")).toMatch(/the earlier launch was cut off before its VM ran \(it was \w+\)/);
    // Its saved memory was consumed before `cont`: the new launch boots the disks.
    expect(rerun.steps.map((s) => s.name)).toContain("boot_vm");
    expect(await readPid(paths.pid)).not.toBe(stuckPid);
    expect(await vmStatus(paths.qmp)).toBe("running");
    expect(ns.curl("http://10.0.0.11:8000/").trim()).toBe("cut-load");
    expect(ns.curl("http://10.0.0.11:8000/cgi-bin/data").trim()).toBe("kept-on-disk");
    await second.remove("cut-load", new RecordingReporter());
  });

  it("reset wipes /data, keeps the IP and leaves the box running", async () => {
    expect(ns.curl("http://10.0.0.3:8000/cgi-bin/data", "before-reset").trim()).toBe("stored");
    const t = performance.now();
    const up = await ex.reset(boxSpec("clone-b", "10.0.0.3", 2), new RecordingReporter());
    timings.resetMs = Math.round(performance.now() - t);
    expect(up(8000)).toBe("10.0.0.3:8000");
    expect(await ex.inspect("clone-b")).toBe("running");
    expect(ns.curl("http://10.0.0.3:8000/cgi-bin/data").trim()).toBe("(none)");
    expect(ns.curl("http://10.0.0.3:8000/").trim()).toBe("clone-b");
  });

  it("a VMM killed with SIGKILL is reported as not running (exited)", async () => {
    const pid = await readPid(boxPaths(dataDir, "clone-c").pid);
    expect(pid).not.toBeNull();
    process.kill(pid!, "SIGKILL");
    let state = await ex.inspect("clone-c");
    for (let i = 0; i < 50 && state === "running"; i++) {
      await new Promise((r) => setTimeout(r, 100));
      state = await ex.inspect("clone-c");
    }
    expect(state).toBe("exited");
    expect(await ex.upstream("clone-c")).toBeNull();
  });

  it("remove leaves no TAP, overlay, volume or socket", async () => {
    for (const [slug, ip] of [
      ["clone-b", "10.0.0.3"],
      ["clone-c", "10.0.0.4"],
    ] as const) {
      const p = boxPaths(dataDir, slug);
      await ex.remove(slug, new RecordingReporter());
      await ex.remove(slug, new RecordingReporter());
      expect(await ex.inspect(slug)).toBe("gone");
      expect(await net.listTaps()).not.toContain(tapNameForIp(ip));
      for (const f of [p.overlay, p.volume, p.qmp, p.serial, p.dir]) expect(existsSync(f)).toBe(false);
    }
    expect((await ex.list()).map((b) => b.slug)).toEqual(["clone-a"]);
  });

  it("a create that cannot proceed fails with a code and leaves nothing behind", async () => {
    const noGolden = { ...boxSpec("orphan-box", "10.0.0.30"), template: "nothing-here" };
    await expect(ex.createFromGolden(noGolden, new RecordingReporter())).rejects.toMatchObject({
      code: "golden_missing",
    });
    await expect(
      ex.createFromGolden(boxSpec("orphan-box", "10.0.0.30", 0), new RecordingReporter()),
    ).rejects.toMatchObject({ code: "invalid_spec" });
    expect(await ex.inspect("orphan-box")).toBe("gone");
    expect(existsSync(boxPaths(dataDir, "orphan-box").dir)).toBe(false);
    expect(await net.listTaps()).not.toContain(tapNameForIp("10.0.0.30"));
  });

  it("user-mode networking forwards the template ports to loopback", async () => {
    const up = await ex.createFromGolden(
      boxSpec("laptop-box", "10.0.0.9", 1, { tap: false }),
      new RecordingReporter(),
    );
    const site = up(8000);
    expect(site).toMatch(/^127\.0\.0\.1:\d+$/);
    expect(ns.curl(`http://${site}/`).trim()).toBe("laptop-box");
    expect(ns.curl(`http://${up(8888)}/`).trim()).toBe("laptop-box");
    expect(up(9000)).toMatch(/^127\.0\.0\.1:\d+$/);
    expect(up(5432)).toBeNull();
    await ex.remove("laptop-box", new RecordingReporter());
  });
});
