import { existsSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HostLayout } from "../../src/vmm/firecracker/layout.ts";
import { LAUNCH_ATTEMPTS } from "../../src/vmm/relaunch.ts";
import { ContractValidator, contractSkipReason, loadDescription } from "./contract.ts";
import { makeRig, RecordingReporter, type Rig, TEMPLATE, vmSpec } from "./harness.ts";

const loaded = loadDescription();
const skipReason = contractSkipReason(loaded, "Firecracker VMM-kill tests");

/**
 * The Firecracker executor when a box's VMM dies before its guest answers its ready ports
 * (the fake jailer's processes, checked against the v1.16.1 API description): the launch is
 * undone and made again (a resume from hibernation resumes again while its saved memory is
 * there, else boots the disks), and only a VMM that dies in every attempt fails the action.
 */
describe.skipIf(skipReason !== null)("Firecracker: a VMM killed before its guest is ready", () => {
  let rig: Rig;
  let layout: HostLayout;
  /** Request (`METHOD /path`) at which the next launch's VMM is killed, once. */
  let killAt: string | null = null;

  const vmms = (slug: string) => rig.processes.forJail(`box-${slug}`);
  const alive = async (slug: string) => {
    const out: number[] = [];
    for (const v of vmms(slug)) if (await rig.processes.isAlive(v.pid, v.jailId)) out.push(v.pid);
    return out;
  };
  /** Kills the newest VMM of the box whose address is `ip` (what a probe knows). */
  const killAtIp = async (ip: string) => {
    const spawned = rig.processes.spawned.filter((s) => s.jailId.startsWith("box-"));
    const slug = [a, b, c].find((s) => s.net.ip === ip)?.slug;
    const last = spawned.filter((s) => s.jailId === `box-${slug}`).at(-1);
    if (!last) throw new Error(`no VMM for ${ip}`);
    await rig.processes.exit(last.pid);
  };
  /** The next launch's VMM is killed once, while the executor waits for its guest. */
  const killOnceWhileWaiting = () => {
    let kills = 1;
    rig.probe.onWait = async (ip) => {
      if (kills-- > 0) await killAtIp(ip);
    };
  };
  const a = vmSpec("killed-once-0001", 1);
  const b = vmSpec("killed-always-0002", 2);
  const c = vmSpec("killed-early-0003", 3);

  beforeAll(async () => {
    if (!("doc" in loaded)) return;
    rig = await makeRig(new ContractValidator(loaded.doc), async (req, jailId) => {
      if (killAt !== `${req.method} ${req.path}` || !jailId.startsWith("box-")) return;
      killAt = null;
      const last = rig.processes.forJail(jailId).at(-1)!;
      // Killed while it answers this call: the next call finds no VMM.
      void rig.processes.exit(last.pid);
    });
    layout = new HostLayout(rig.cfg.stateDir, rig.cfg.chrootBase, "firecracker");
    await rig.executor.buildGolden(TEMPLATE, new RecordingReporter());
  });
  afterAll(async () => {
    await rig?.cleanup();
  });

  it("a create whose VMM is killed while it waits for the guest launches again and the box runs", async () => {
    killOnceWhileWaiting();
    const report = new RecordingReporter();
    const up = await rig.executor.createFromGolden(a, report);
    rig.probe.onWait = null;
    expect(up(8000)).toBe("10.0.0.11:8000");
    expect(report.steps.filter((s) => s === "restore_vm")).toHaveLength(2);
    expect(report.lines.join("\n")).toContain(`(attempt 1 of ${LAUNCH_ATTEMPTS}`);
    expect(vmms(a.slug)).toHaveLength(2);
    // One VMM runs for the box: the second launch's.
    expect(await alive(a.slug)).toEqual([vmms(a.slug)[1]!.pid]);
    expect(await rig.executor.inspect(a.slug)).toBe("running");
    expect(rig.network.taps.has(a.net.tap!)).toBe(true);
  });

  it("a VMM killed mid-restore (its API gone before the guest runs) is launched again too", async () => {
    killAt = "PUT /mmds";
    const report = new RecordingReporter();
    await rig.executor.createFromGolden(c, report);
    expect(killAt).toBeNull();
    expect(report.steps.filter((s) => s === "restore_vm")).toHaveLength(2);
    expect(await alive(c.slug)).toEqual([vmms(c.slug)[1]!.pid]);
    expect(await rig.executor.inspect(c.slug)).toBe("running");
  });

  it("a create whose VMM is killed in every attempt fails with guest_not_ready and leaves nothing", async () => {
    rig.probe.onWait = killAtIp;
    const report = new RecordingReporter();
    await expect(rig.executor.createFromGolden(b, report)).rejects.toMatchObject({
      code: "guest_not_ready",
      message: expect.stringContaining(`in each of ${LAUNCH_ATTEMPTS} attempts`),
    });
    rig.probe.onWait = null;
    expect(vmms(b.slug)).toHaveLength(LAUNCH_ATTEMPTS);
    expect(await alive(b.slug)).toEqual([]);
    expect(await rig.executor.inspect(b.slug)).toBe("gone");
    expect(existsSync(layout.vmDir(b.slug))).toBe(false);
    expect(rig.network.taps.has(b.net.tap!)).toBe(false);
  });

  it("a start whose VMM is killed before the guest answers boots the box's disks again", async () => {
    await rig.executor.stop(a.slug, new RecordingReporter());
    killOnceWhileWaiting();
    const report = new RecordingReporter();
    await rig.executor.start(a, report);
    rig.probe.onWait = null;
    expect(report.steps.filter((s) => s === "boot_vm")).toHaveLength(2);
    const all = vmms(a.slug);
    expect(await alive(a.slug)).toEqual([all.at(-1)!.pid]);
    expect(await rig.executor.inspect(a.slug)).toBe("running");
  });

  it("a resume whose VMM is killed while it loads the snapshot resumes again from the saved memory", async () => {
    await rig.executor.hibernate(a.slug, new RecordingReporter());
    killAt = "PUT /snapshot/load";
    const report = new RecordingReporter();
    await rig.executor.start(a, report);
    expect(killAt).toBeNull();
    expect(report.steps.filter((s) => s === "resume_vm")).toHaveLength(2);
    expect(report.steps).not.toContain("boot_vm");
    expect(report.lines.join("\n")).toContain(`(attempt 1 of ${LAUNCH_ATTEMPTS}`);
    expect(await alive(a.slug)).toEqual([vmms(a.slug).at(-1)!.pid]);
    expect(await rig.executor.inspect(a.slug)).toBe("running");
    expect(await rig.executor.memoryFileBytes(a.slug)).toBeNull();
  });

  it("a resume whose VMM is killed after it consumed the saved memory boots the box's disks", async () => {
    await rig.executor.hibernate(a.slug, new RecordingReporter());
    killOnceWhileWaiting();
    const report = new RecordingReporter();
    await rig.executor.start(a, report);
    rig.probe.onWait = null;
    expect(report.steps.filter((s) => s === "resume_vm")).toHaveLength(1);
    expect(report.steps.filter((s) => s === "boot_vm")).toHaveLength(1);
    expect(await alive(a.slug)).toEqual([vmms(a.slug).at(-1)!.pid]);
    expect(await rig.executor.inspect(a.slug)).toBe("running");
  });
});
