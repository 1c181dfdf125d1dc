import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as delay } from "node:timers/promises";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LinuxHostNetwork } from "../../src/net/host-network.ts";
import { tapNameForIp } from "../../src/net/naming.ts";
import type { StepReporter } from "../../src/vmm/executor.ts";
import { QemuExecutor } from "../../src/vmm/qemu/executor.ts";
import { boxPaths } from "../../src/vmm/qemu/layout.ts";
import { isVmProcess, readPid } from "../../src/vmm/qemu/process.ts";
import { readySeen } from "../../src/vmm/qemu/ready.ts";
import { LAUNCH_ATTEMPTS } from "../../src/vmm/relaunch.ts";
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
  console.warn(`SKIPPING QEMU VMM-kill tests: ${missing} (CI must provide root, qemu, iproute2, apt)`);

type Step = Parameters<StepReporter["step"]>[0];

/** Live (non-zombie) QEMU processes whose command line names `dir`: the box's VMMs. */
function vmmsOf(dir: string): number[] {
  const out: number[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const cmd = readFileSync(`/proc/${name}/cmdline`, "utf8").split("\0");
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      const state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
      if (state !== "Z" && cmd.some((a) => a.includes("qemu-system")) && cmd.some((a) => a.includes(dir)))
        out.push(Number(name));
    } catch {
      // the process ended while it was read
    }
  }
  return out;
}

/** The reported steps among `names`, in order, with how each ended. */
function outcomes(report: RecordingReporter, names: string[]): string[] {
  return report.steps.filter((s) => names.includes(s.name)).map((s) => `${s.name}:${s.ok ? "ok" : "failed"}`);
}

describe.skipIf(missing !== null)(
  "a VMM killed before its guest is ready (real QEMU in a test netns)",
  { timeout: 240_000 },
  () => {
    let ns: TestNetns;
    let net: LinuxHostNetwork;
    let ex: QemuExecutor;
    let dataDir: string;

    /**
     * Kills the box's VMM with SIGKILL at the start of each of its first `kills` wait_ready
     * steps: the VMM has loaded (or booted) and runs the guest, which has not printed its
     * READY yet (checked, so a test never passes on a kill that came too late).
     */
    class Killer extends RecordingReporter {
      readonly lines: string[] = [];
      readonly killed: number[] = [];
      constructor(
        private readonly slug: string,
        private readonly generation: number,
        private kills: number,
      ) {
        super();
      }
      override async step<T>(name: Step, fn: () => Promise<T>): Promise<T> {
        if (name === "wait_ready" && this.kills > 0) {
          this.kills--;
          const p = boxPaths(dataDir, this.slug);
          const pid = await readPid(p.pid);
          if (pid === null) throw new Error("wait_ready began without a pid file");
          process.kill(pid, "SIGKILL");
          for (let i = 0; i < 200 && (await isVmProcess(pid, p.dir)); i++) await delay(10);
          expect(await isVmProcess(pid, p.dir)).toBe(false);
          expect(await readySeen(p.serial, 0, this.generation)).toBe(false);
          this.killed.push(pid);
        }
        return super.step(name, fn);
      }
      override log(line: string): void {
        this.lines.push(line);
      }
    }

    beforeAll(async () => {
      ns = TestNetns.create();
      dataDir = mkdtempSync(join(tmpdir(), "dbxkill-"));
      buildMinimalImage("test");
      net = new LinuxHostNetwork({ bridge: "br-devbox", cidr: "10.0.0.0/16", netns: ns.name });
      await net.ensureBridge();
      ex = await minimalGoldenExecutor({ dataDir, network: net, netns: ns.name, imageVersion: "test" });
    }, 300_000);

    afterAll(async () => {
      await removeAllAndClose(ex);
      ns?.destroy();
      if (dataDir) rmSync(dataDir, { recursive: true, force: true });
    });

    it("a create whose VMM is killed while it waits for READY launches again and the box runs", async () => {
      const report = new Killer("killed-once", 1, 1);
      const up = await ex.createFromGolden(boxSpec("killed-once", "10.0.0.2"), report);
      expect(report.killed).toHaveLength(1);
      // The first launch's wait_ready failed; a whole second launch (new disks and TAP, as
      // its leftovers were removed) followed and succeeded. Disks and network run side by side.
      expect(outcomes(report, ["restore_vm", "wait_ready"])).toEqual([
        "restore_vm:ok",
        "wait_ready:failed",
        "restore_vm:ok",
        "wait_ready:ok",
      ]);
      expect(outcomes(report, ["prepare_disks", "setup_network"]).sort()).toEqual([
        "prepare_disks:ok",
        "prepare_disks:ok",
        "setup_network:ok",
        "setup_network:ok",
      ]);
      expect(report.lines.join("\n")).toMatch(
        new RegExp(`VMM exited before the guest was ready \\(attempt 1 of ${LAUNCH_ATTEMPTS}`),
      );
      expect(up(8000)).toBe("10.0.0.2:8000");
      expect(await ex.inspect("killed-once")).toBe("running");
      expect(ns.curl("http://10.0.0.2:8000/").trim()).toBe("killed-once");
      // One VMM for the box, the new one; one TAP for it.
      const dir = boxPaths(dataDir, "killed-once").dir;
      const pid = await readPid(boxPaths(dataDir, "killed-once").pid);
      expect(vmmsOf(dir)).toEqual([pid]);
      expect(pid).not.toBe(report.killed[0]);
      expect((await net.listTaps()).filter((t) => t === tapNameForIp("10.0.0.2"))).toHaveLength(1);
    });

    it("a start whose VMM is killed before READY boots again from the box's own disks", async () => {
      expect(ns.curl("http://10.0.0.2:8000/cgi-bin/data", "kept").trim()).toBe("stored");
      await ex.stop("killed-once", new RecordingReporter());
      const report = new Killer("killed-once", 2, 1);
      await ex.start(boxSpec("killed-once", "10.0.0.2", 2), report);
      expect(report.killed).toHaveLength(1);
      expect(outcomes(report, ["setup_network", "boot_vm", "wait_ready"])).toEqual([
        "setup_network:ok",
        "boot_vm:ok",
        "wait_ready:failed",
        "setup_network:ok",
        "boot_vm:ok",
        "wait_ready:ok",
      ]);
      expect(ns.curl("http://10.0.0.2:8000/cgi-bin/data").trim()).toBe("kept");
      const pid = await readPid(boxPaths(dataDir, "killed-once").pid);
      expect(vmmsOf(boxPaths(dataDir, "killed-once").dir)).toEqual([pid]);
    });

    it("a VMM killed as soon as it starts (before the snapshot is loaded) is launched again too", async () => {
      // The kill lands in the restore step: QEMU's pid file is there, the stream is loading.
      const slug = "killed-early";
      const p = boxPaths(dataDir, slug);
      let killed: number | null = null;
      const report = new (class extends RecordingReporter {
        override async step<T>(name: Step, fn: () => Promise<T>): Promise<T> {
          if (name !== "restore_vm" || killed !== null) return super.step(name, fn);
          const running = super.step(name, fn);
          for (let i = 0; i < 2_000 && killed === null; i++) {
            const pid = await readPid(p.pid);
            if (pid !== null) {
              process.kill(pid, "SIGKILL");
              killed = pid;
            } else await delay(2);
          }
          return running;
        }
      })();
      await ex.createFromGolden(boxSpec(slug, "10.0.0.3"), report);
      expect(killed).not.toBeNull();
      expect(outcomes(report, ["restore_vm", "wait_ready"])).toEqual([
        "restore_vm:failed",
        "restore_vm:ok",
        "wait_ready:ok",
      ]);
      expect(report.steps.filter((s) => s.name === "prepare_disks")).toHaveLength(2);
      expect(ns.curl("http://10.0.0.3:8000/").trim()).toBe(slug);
      expect(vmmsOf(p.dir)).toEqual([await readPid(p.pid)]);
      await ex.remove(slug, new RecordingReporter());
    });

    it("a create whose VMM is killed in every attempt fails with guest_not_ready and leaves nothing", async () => {
      const slug = "killed-always";
      const report = new Killer(slug, 1, LAUNCH_ATTEMPTS);
      const failed = ex.createFromGolden(boxSpec(slug, "10.0.0.4"), report);
      await expect(failed).rejects.toMatchObject({
        code: "guest_not_ready",
        message: expect.stringMatching(new RegExp(`in each of ${LAUNCH_ATTEMPTS} attempts`)),
      });
      expect(report.killed).toHaveLength(LAUNCH_ATTEMPTS);
      expect(report.steps.filter((s) => s.name === "restore_vm")).toHaveLength(LAUNCH_ATTEMPTS);
      const p = boxPaths(dataDir, slug);
      expect(await ex.inspect(slug)).toBe("gone");
      expect(existsSync(p.dir)).toBe(false);
      expect(vmmsOf(p.dir)).toEqual([]);
      expect(await net.listTaps()).not.toContain(tapNameForIp("10.0.0.4"));
    });

    it("a guest that does not report READY while its VMM runs is not launched again", async () => {
      // The same host with a ready timeout no guest can meet: the VMM runs, the guest is late.
      const impatient = new QemuExecutor({
        dataDir,
        imagesDir: IMAGES_DIR,
        network: net,
        netns: ns.name,
        goldenNet: GOLDEN_NET,
        accel: "tcg",
        volumePoolPerSize: 0,
        readyTimeoutMs: 1,
        log: pino({ level: "warn" }),
      });
      const slug = "late-guest";
      const report = new RecordingReporter();
      await expect(impatient.createFromGolden(boxSpec(slug, "10.0.0.5"), report)).rejects.toMatchObject({
        code: "guest_not_ready",
        message: expect.stringMatching(/^no DOPPIO-READY 1 within 1 ms/),
      });
      expect(report.steps.filter((s) => s.name === "restore_vm")).toHaveLength(1);
      const p = boxPaths(dataDir, slug);
      expect(existsSync(p.dir)).toBe(false);
      expect(vmmsOf(p.dir)).toEqual([]);
      expect(await net.listTaps()).not.toContain(tapNameForIp("10.0.0.5"));
      await impatient.close();
    });
  },
);
