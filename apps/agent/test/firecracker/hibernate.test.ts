import { existsSync, readFileSync, statSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HostLayout } from "../../src/vmm/firecracker/layout.ts";
import { ContractValidator, contractSkipReason, loadDescription } from "./contract.ts";
import type { RecordedRequest } from "./fake-firecracker.ts";
import { makeRig, RecordingReporter, type Rig, TEMPLATE, vmSpec } from "./harness.ts";

const loaded = loadDescription();
const skipReason = contractSkipReason(loaded, "Firecracker hibernate contract tests");

// Hibernate = pause + full snapshot into the jail + kill + commit to the box's dir; resume =
// snapshot load of that snapshot with the box's TAP, fresh MMDS, resume. Every request is
// checked against Firecracker's published API description by the fake.
describe.skipIf(skipReason !== null)("Firecracker hibernate and resume (API contract)", () => {
  let rig: Rig;
  let layout: HostLayout;
  /** While set, the next PUT /snapshot/create of this jail runs it first (e.g. kills the VMM). */
  let onSnapshot: ((jailId: string) => Promise<void>) | null = null;
  const a = vmSpec("sleepy-otter-0007", 7);

  beforeAll(async () => {
    if (!("doc" in loaded)) return;
    rig = await makeRig(new ContractValidator(loaded.doc), async (req: RecordedRequest, jailId: string) => {
      if (`${req.method} ${req.path}` === "PUT /snapshot/create" && onSnapshot) {
        const hook = onSnapshot;
        onSnapshot = null;
        await hook(jailId);
      }
    });
    layout = new HostLayout(rig.cfg.stateDir, rig.cfg.chrootBase, "firecracker");
    await rig.executor.buildGolden(TEMPLATE, new RecordingReporter());
    await rig.executor.createFromGolden(a, new RecordingReporter());
  });
  afterAll(async () => {
    await rig?.cleanup();
  });

  const lastVmm = () => {
    const last = rig.processes.forJail("box-sleepy-otter-0007").at(-1);
    if (!last) throw new Error("no VMM spawned");
    return last;
  };
  const memoryDir = () => path.join(layout.vmDir(a.slug), "memory");

  it("hibernates: pause, full snapshot into a dir the VM may write, VMM killed, files committed", async () => {
    const vmm = lastVmm();
    const before = vmm.fake.requests.length;
    const report = new RecordingReporter();
    const { memoryFileBytes } = await rig.executor.hibernate(a.slug, report);
    expect(report.steps).toEqual(["hibernate_vm", "teardown_network"]);
    const calls = vmm.fake.requests.slice(before).map((r) => `${r.method} ${r.path}`);
    expect(calls).toEqual(["PATCH /vm", "PUT /snapshot/create"]);
    expect(vmm.fake.requests.every((r) => r.fault === undefined)).toBe(true);
    expect(vmm.fake.responseProblems).toEqual([]);
    expect(vmm.fake.requests.slice(before).map((r) => r.body)).toEqual([
      { state: "Paused" },
      { snapshot_type: "Full", snapshot_path: "/hibernate/vmstate", mem_file_path: "/hibernate/mem" },
    ]);
    expect(await rig.processes.isAlive(vmm.pid, vmm.jailId)).toBe(false);
    expect(existsSync(layout.jailDir(vmm.jailId))).toBe(false);
    expect(rig.network.taps.has("fc-t7")).toBe(false);
    const sizes = ["vmstate", "mem"].map((f) => statSync(path.join(memoryDir(), f)).size);
    expect(memoryFileBytes).toBe(sizes[0]! + sizes[1]!);
    expect(statSync(path.join(memoryDir(), "mem")).uid).toBe(0);
    expect(existsSync(`${memoryDir()}.partial`)).toBe(false);
    expect(await rig.executor.inspect(a.slug)).toBe("hibernated");
    expect(await rig.executor.memoryFileBytes(a.slug)).toBe(memoryFileBytes);
    // A retried hibernate answers with the saved files and starts nothing.
    const spawned = rig.processes.spawned.length;
    expect(await rig.executor.hibernate(a.slug, new RecordingReporter())).toEqual({ memoryFileBytes });
    expect(rig.processes.spawned.length).toBe(spawned);
  });

  it("start resumes: load its own snapshot paused on the same TAP, new MMDS, resume; the files are consumed", async () => {
    const resumed = {
      ...a,
      metadata: { ...a.metadata, generation: 2, issued_at: a.metadata.issued_at + 60_000 },
    };
    const report = new RecordingReporter();
    const upstream = await rig.executor.start(resumed, report);
    expect(upstream(8000)).toBe("10.0.0.17:8000");
    expect(report.steps).toEqual(["setup_network", "resume_vm", "wait_ready"]);
    const vmm = lastVmm();
    expect(vmm.fake.calls()).toEqual([
      "PUT /logger",
      "PUT /metrics",
      "PUT /snapshot/load",
      "PUT /mmds",
      "PATCH /vm",
    ]);
    expect(vmm.fake.requests.every((r) => r.fault === undefined)).toBe(true);
    const body = (call: string) => vmm.fake.requests.find((r) => `${r.method} ${r.path}` === call)?.body;
    expect(body("PUT /snapshot/load")).toEqual({
      snapshot_path: "/snapshot/vmstate",
      mem_backend: { backend_type: "File", backend_path: "/snapshot/mem" },
      track_dirty_pages: false,
      resume_vm: false,
      network_overrides: [{ iface_id: "eth0", host_dev_name: "fc-t7" }],
    });
    // The guest re-applies its metadata (clock included) on the new generation.
    expect(body("PUT /mmds")).toEqual({ latest: { "meta-data": { devbox: resumed.metadata } } });
    expect(body("PATCH /vm")).toEqual({ state: "Resumed" });
    expect(existsSync(memoryDir())).toBe(false);
    expect(await rig.executor.inspect(a.slug)).toBe("running");
    expect(await rig.executor.memoryFileBytes(a.slug)).toBeNull();
  });

  it("a VMM killed while it writes the snapshot leaves no saved memory; start boots the disks", async () => {
    const vmm = lastVmm();
    onSnapshot = async () => {
      await rig.processes.exit(vmm.pid);
    };
    await expect(rig.executor.hibernate(a.slug, new RecordingReporter())).rejects.toBeDefined();
    expect(existsSync(memoryDir())).toBe(false);
    expect(await rig.executor.inspect(a.slug)).toBe("exited");
    const report = new RecordingReporter();
    await rig.executor.start(a, report);
    expect(report.steps).toContain("boot_vm");
    expect(report.steps).not.toContain("resume_vm");
  });

  it("a snapshot that does not read back whole is never loaded", async () => {
    await rig.executor.hibernate(a.slug, new RecordingReporter());
    // A torn memory file (its size no longer matches what was committed).
    writeFileSync(path.join(memoryDir(), "mem"), "torn");
    expect(await rig.executor.inspect(a.slug)).toBe("stopped");
    const report = new RecordingReporter();
    await rig.executor.start(a, report);
    expect(report.steps).toContain("boot_vm");
    expect(JSON.parse(readFileSync(layout.vmFile(a.slug, "vm.json"), "utf8")).lifecycle).toBe("running");
  });

  it("stop of a hibernated box discards its memory", async () => {
    await rig.executor.hibernate(a.slug, new RecordingReporter());
    await rig.executor.stop(a.slug, new RecordingReporter());
    expect(existsSync(memoryDir())).toBe(false);
    expect(await rig.executor.inspect(a.slug)).toBe("stopped");
    await expect(rig.executor.hibernate(a.slug, new RecordingReporter())).rejects.toMatchObject({
      code: "not_running",
    });
  });
});
