import {
  appendFileSync,
  chmodSync,
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readFileSync,
  readSync,
  statSync,
} from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { FirecrackerError } from "../../src/vmm/firecracker/errors.ts";
import { jailerArgs } from "../../src/vmm/firecracker/jailer.ts";
import { HostLayout } from "../../src/vmm/firecracker/layout.ts";
import { ContractValidator, contractSkipReason, loadDescription } from "./contract.ts";
import { makeRig, RecordingReporter, type Rig, TEMPLATE, vmSpec } from "./harness.ts";

const loaded = loadDescription();
const skipReason = contractSkipReason(loaded, "Firecracker lifecycle contract tests");

const COLD_BOOT = [
  "PUT /logger",
  "PUT /metrics",
  "PUT /machine-config",
  "PUT /boot-source",
  "PUT /drives/rootfs",
  "PUT /drives/volume",
  "PUT /network-interfaces/eth0",
  "PUT /entropy",
  "PUT /mmds/config",
  "PUT /mmds",
  "PUT /actions",
];
const RESTORE = [
  "PUT /logger",
  "PUT /metrics",
  "PUT /snapshot/load",
  "PUT /mmds",
  "PATCH /vm",
  "PATCH /balloon",
];

describe.skipIf(skipReason !== null)("Firecracker executor against the v1.16.1 API description", () => {
  let rig: Rig;
  let layout: HostLayout;
  const a = vmSpec("brisk-falcon-0001", 1);

  beforeAll(async () => {
    if (!("doc" in loaded)) return;
    rig = await makeRig(new ContractValidator(loaded.doc));
    layout = new HostLayout(rig.cfg.stateDir, rig.cfg.chrootBase, "firecracker");
  });
  afterAll(async () => {
    await rig?.cleanup();
  });

  const lastVmm = (jailId: string) => {
    const all = rig.processes.forJail(jailId);
    const last = all[all.length - 1];
    if (!last) throw new Error(`no VMM spawned for ${jailId}`);
    return last;
  };
  const body = (jailId: string, call: string) =>
    lastVmm(jailId).fake.requests.find((r) => `${r.method} ${r.path}` === call)?.body;

  it("builds the golden snapshot: boot with MMDS configured, pause, full snapshot, publish", async () => {
    const report = new RecordingReporter();
    const info = await rig.executor.buildGolden(TEMPLATE, report);
    expect(info).toMatchObject({ template: "frappe", version: "v1", status: "ready", error: null });
    expect(report.steps).toEqual(["prepare_disks", "setup_network", "boot_vm", "wait_ready", "snapshot_vm"]);

    const [vmm] = rig.processes.spawned;
    expect(vmm).toBeDefined();
    const fake = vmm!.fake;
    expect(fake.calls()).toEqual([
      ...COLD_BOOT.slice(0, 8),
      "PUT /balloon",
      ...COLD_BOOT.slice(8),
      "PATCH /vm",
      "PUT /snapshot/create",
    ]);
    expect(fake.requests.every((r) => r.fault === undefined)).toBe(true);
    expect(fake.responseProblems).toEqual([]);
    const req = (call: string) => fake.requests.find((r) => `${r.method} ${r.path}` === call)?.body;
    expect(req("PUT /machine-config")).toEqual({
      vcpu_count: 2,
      mem_size_mib: 4096,
      smt: false,
      track_dirty_pages: false,
    });
    expect(req("PUT /network-interfaces/eth0")).toEqual({
      iface_id: "eth0",
      host_dev_name: "fc-golden",
      guest_mac: "06:00:0a:00:ff:fe",
    });
    expect(req("PUT /mmds/config")).toEqual({ version: "V2", network_interfaces: ["eth0"] });
    expect(req("PUT /mmds")).toMatchObject({
      latest: { "meta-data": { devbox: { network: { ip: "10.0.255.254" } } } },
    });
    expect(req("PATCH /vm")).toEqual({ state: "Paused" });
    expect(req("PUT /snapshot/create")).toEqual({
      snapshot_type: "Full",
      snapshot_path: "/snapshot/vmstate",
      mem_file_path: "/snapshot/mem",
    });
    // Paused and saved: killed, not asked to shut down.
    expect(await rig.processes.isAlive(vmm!.pid, vmm!.jailId)).toBe(false);
    expect(rig.probe.calls[0]).toEqual({ ip: "10.0.255.254", ports: [8000, 8888] });

    // Jailer command line: own chroot, uid/gid and cgroup v2 group; Firecracker args after --.
    const uid = Number(vmm!.args[vmm!.args.indexOf("--uid") + 1]);
    expect(vmm!.command).toBe(rig.cfg.jailerBin);
    expect(vmm!.args).toEqual(jailerArgs(rig.cfg, { jailId: vmm!.jailId, uid, gid: uid, memoryMb: 4096 }));
    expect(vmm!.args.slice(-3)).toEqual(["--", "--api-sock", "/run/firecracker.socket"]);
    expect(vmm!.args).toContain(`memory.max=${(4096 + 256) * 1024 * 1024}`);

    // Published build: read-only masters; the build's jail, TAP and uid are gone.
    const golden = path.join(rig.cfg.stateDir, "golden/frappe");
    const { buildId } = JSON.parse(readFileSync(path.join(golden, "current.json"), "utf8"));
    for (const f of ["vmstate", "mem", "rootfs.ext4", "volume.ext4"]) {
      expect(statSync(path.join(golden, "builds", buildId, f)).mode & 0o777).toBe(0o444);
    }
    expect(existsSync(layout.jailDir(vmm!.jailId))).toBe(false);
    expect(rig.network.taps.size).toBe(0);
    expect(existsSync(path.join(rig.cfg.stateDir, "uids", String(uid)))).toBe(false);
    expect(await rig.executor.goldenStatus("frappe")).toMatchObject({
      status: "ready",
      version: "v1",
      imageVersion: "v1",
    });
  });

  it("creates from golden: load paused, PUT /mmds, resume, then shrink with the balloon", async () => {
    const report = new RecordingReporter();
    const upstream = await rig.executor.createFromGolden(a, report);
    expect(upstream(8000)).toBe("10.0.0.11:8000");
    expect(report.steps).toEqual([
      "prepare_disks",
      "setup_network",
      "restore_vm",
      "apply_identity",
      "wait_ready",
    ]);
    const vmm = lastVmm("box-brisk-falcon-0001");
    expect(vmm.fake.calls()).toEqual(RESTORE);
    expect(vmm.fake.requests.every((r) => r.fault === undefined)).toBe(true);
    expect(body(vmm.jailId, "PUT /snapshot/load")).toEqual({
      snapshot_path: "/snapshot/vmstate",
      mem_backend: { backend_type: "File", backend_path: "/snapshot/mem" },
      track_dirty_pages: false,
      resume_vm: false,
      network_overrides: [{ iface_id: "eth0", host_dev_name: "fc-t1" }],
    });
    expect(body(vmm.jailId, "PUT /mmds")).toEqual({ latest: { "meta-data": { devbox: a.metadata } } });
    expect(body(vmm.jailId, "PATCH /vm")).toEqual({ state: "Resumed" });
    expect(body(vmm.jailId, "PATCH /balloon")).toEqual({ amount_mib: 4096 - 2048 });

    // Disks are the box's own copies; the jail shares their inodes and the golden memory's.
    const golden = path.join(rig.cfg.stateDir, "golden/frappe");
    const { buildId } = JSON.parse(readFileSync(path.join(golden, "current.json"), "utf8"));
    const overlay = statSync(layout.vmFile(a.slug, "rootfs.ext4"));
    expect(overlay.ino).not.toBe(statSync(path.join(golden, "builds", buildId, "rootfs.ext4")).ino);
    expect(statSync(layout.inJail(vmm.jailId, "/rootfs.ext4")).ino).toBe(overlay.ino);
    expect(statSync(layout.inJail(vmm.jailId, "/snapshot/mem")).ino).toBe(
      statSync(path.join(golden, "builds", buildId, "mem")).ino,
    );
    expect(statSync(layout.vmFile(a.slug, "volume.ext4")).size).toBe(2 * 1024 ** 3);
    expect(await rig.executor.inspect(a.slug)).toBe("running");
    expect(rig.network.taps.has("fc-t1")).toBe(true);
  });

  it("create on a running box is a no-op", async () => {
    const before = rig.processes.spawned.length;
    const upstream = await rig.executor.createFromGolden(a, new RecordingReporter());
    expect(upstream(8888)).toBe("10.0.0.11:8888");
    expect(rig.processes.spawned.length).toBe(before);
  });

  it("stops: Ctrl+Alt+Del, jail and TAP removed, disks kept", async () => {
    const vmm = lastVmm("box-brisk-falcon-0001");
    await rig.executor.stop(a.slug, new RecordingReporter());
    expect(vmm.fake.calls().at(-1)).toBe("PUT /actions");
    expect(vmm.fake.requests.at(-1)?.body).toEqual({ action_type: "SendCtrlAltDel" });
    expect(await rig.executor.inspect(a.slug)).toBe("stopped");
    expect(existsSync(layout.jailDir(vmm.jailId))).toBe(false);
    expect(rig.network.taps.has("fc-t1")).toBe(false);
    expect(existsSync(layout.vmFile(a.slug, "rootfs.ext4"))).toBe(true);
    expect(await rig.executor.upstream(a.slug)).toBeNull();
  });

  it("a retried create on a stopped box boots its disks instead of wiping them", async () => {
    appendFileSync(layout.vmFile(a.slug, "volume.ext4"), "user files");
    const size = statSync(layout.vmFile(a.slug, "volume.ext4")).size;
    await rig.executor.createFromGolden(a, new RecordingReporter());
    expect(lastVmm("box-brisk-falcon-0001").fake.calls()).toEqual(COLD_BOOT);
    expect(statSync(layout.vmFile(a.slug, "volume.ext4")).size).toBe(size);
    await rig.executor.stop(a.slug, new RecordingReporter());
    expect(await rig.executor.inspect(a.slug)).toBe("stopped");
  });

  it("starts as a cold boot from overlay + volume, re-PUTting MMDS", async () => {
    mkdirSync(layout.vmFile(a.slug, "snapshot"));
    const report = new RecordingReporter();
    const upstream = await rig.executor.start({ ...a, memoryMb: 3072 }, report);
    expect(upstream(8000)).toBe("10.0.0.11:8000");
    expect(report.steps).toEqual(["prepare_disks", "setup_network", "boot_vm", "wait_ready"]);
    const vmm = lastVmm("box-brisk-falcon-0001");
    expect(vmm.fake.calls()).toEqual(COLD_BOOT);
    expect(vmm.fake.requests.every((r) => r.fault === undefined)).toBe(true);
    expect(body(vmm.jailId, "PUT /machine-config")).toMatchObject({ mem_size_mib: 3072, vcpu_count: 2 });
    expect(body(vmm.jailId, "PUT /boot-source")).toEqual({
      kernel_image_path: "/vmlinux",
      boot_args: rig.cfg.bootArgs,
    });
    expect(body(vmm.jailId, "PUT /drives/rootfs")).toEqual({
      drive_id: "rootfs",
      path_on_host: "/rootfs.ext4",
      is_root_device: true,
      is_read_only: false,
    });
    expect(body(vmm.jailId, "PUT /mmds")).toEqual({ latest: { "meta-data": { devbox: a.metadata } } });
    expect(body(vmm.jailId, "PUT /actions")).toEqual({ action_type: "InstanceStart" });
    expect(existsSync(layout.vmFile(a.slug, "snapshot"))).toBe(false);
    expect(await rig.executor.inspect(a.slug)).toBe("running");
  });

  it("reports exited when the VMM dies without a stop, and lists it", async () => {
    await rig.processes.exit(lastVmm("box-brisk-falcon-0001").pid);
    expect(await rig.executor.inspect(a.slug)).toBe("exited");
    expect(await rig.executor.list()).toEqual([{ slug: a.slug, state: "exited" }]);
  });

  it("resets: same identity, fresh disks from golden, running", async () => {
    appendFileSync(layout.vmFile(a.slug, "rootfs.ext4"), "user changes");
    const report = new RecordingReporter();
    await rig.executor.reset(a, report);
    expect(report.steps).toContain("remove_disks");
    expect(report.steps).toContain("restore_vm");
    expect(lastVmm("box-brisk-falcon-0001").fake.calls()).toEqual(RESTORE);
    expect(statSync(layout.vmFile(a.slug, "rootfs.ext4")).size).toBe(64 * 1024);
    expect(await rig.executor.inspect(a.slug)).toBe("running");
  });

  it("cold-boot create makes a fresh ext4 volume of the requested size", async () => {
    const b = vmSpec("calm-river-0002", 2);
    await rig.executor.createColdBoot(b, new RecordingReporter());
    expect(lastVmm("box-calm-river-0002").fake.calls()).toEqual(COLD_BOOT);
    const volume = layout.vmFile(b.slug, "volume.ext4");
    expect(statSync(volume).size).toBe(2 * 1024 ** 3);
    // ext4 superblock magic 0xEF53 at offset 1080.
    const magic = Buffer.alloc(2);
    const fd = openSync(volume, "r");
    readSync(fd, magic, 0, 2, 1080);
    closeSync(fd);
    expect(magic.toString("hex")).toBe("53ef");
    await rig.executor.remove(b.slug, new RecordingReporter());
  });

  it("a create cut off by an agent restart while its guest was not ready waits for it when run again", async () => {
    const d = vmSpec("quiet-dawn-0005", 5);
    let ready!: () => void;
    rig.probe.hold = new Promise((r) => {
      ready = r;
    });
    // The first agent's create reaches wait_ready and "dies" there (it never returns).
    const cut = rig.executor.createFromGolden(d, new RecordingReporter());
    await vi.waitFor(() => expect(rig.probe.calls.at(-1)?.ip).toBe(d.net.ip));
    expect(await rig.executor.inspect(d.slug)).toBe("running");
    expect(await rig.executor.upstream(d.slug)).toBeNull();
    const spawned = rig.processes.spawned.length;

    // The next agent runs the create again: it adopts the VMM and waits for the guest.
    let rerunDone = false;
    const report = new RecordingReporter();
    const rerun = rig.executor.createFromGolden(d, report).then((u) => {
      rerunDone = true;
      return u;
    });
    await vi.waitFor(() => expect(report.steps).toEqual(["wait_ready"]));
    expect(rerunDone).toBe(false);
    ready();
    rig.probe.hold = null;
    expect((await rerun)(8000)).toBe("10.0.0.15:8000");
    await cut;
    expect(rig.processes.spawned.length).toBe(spawned);
    expect((await rig.executor.upstream(d.slug))?.(8000)).toBe("10.0.0.15:8000");
    // Ready now: a later start does not wait again.
    const later = new RecordingReporter();
    await rig.executor.start(d, later);
    expect(later.steps).toEqual([]);
    await rig.executor.remove(d.slug, new RecordingReporter());
  });

  it("surfaces Firecracker's fault_message and undoes a failed restore", async () => {
    const golden = path.join(rig.cfg.stateDir, "golden/frappe");
    const { buildId } = JSON.parse(readFileSync(path.join(golden, "current.json"), "utf8"));
    const vmstate = path.join(golden, "builds", buildId, "vmstate");
    // Readable by root only: the jailed VMM (its own uid) cannot open it.
    chmodSync(vmstate, 0o400);
    const c = vmSpec("eager-comet-0003", 3);
    const err = await rig.executor.createFromGolden(c, new RecordingReporter()).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(FirecrackerError);
    expect((err as FirecrackerError).code).toBe("api_rejected");
    expect((err as FirecrackerError).status).toBe(400);
    expect((err as FirecrackerError).faultMessage).toMatch(
      /Cannot open \/snapshot\/vmstate: Permission denied/,
    );
    expect(await rig.executor.inspect(c.slug)).toBe("gone");
    expect(rig.network.taps.has("fc-t3")).toBe(false);
    expect(existsSync(layout.jailDir("box-eager-comet-0003"))).toBe(false);
    chmodSync(vmstate, 0o444);
  });

  it("removes every artifact; the box is gone", async () => {
    await rig.executor.remove(a.slug, new RecordingReporter());
    expect(await rig.executor.inspect(a.slug)).toBe("gone");
    expect(existsSync(layout.vmDir(a.slug))).toBe(false);
    expect(await rig.executor.list()).toEqual([]);
    expect(rig.network.taps.size).toBe(0);
    // Idempotent.
    await rig.executor.remove(a.slug, new RecordingReporter());
  });

  it("start of an unknown box is not_found; create without golden is golden_missing", async () => {
    await expect(
      rig.executor.start(vmSpec("tidy-grove-0004", 4), new RecordingReporter()),
    ).rejects.toMatchObject({
      code: "not_found",
    });
    const other = { ...vmSpec("tidy-grove-0004", 4), template: "no-such-template" };
    await expect(rig.executor.createFromGolden(other, new RecordingReporter())).rejects.toMatchObject({
      code: "golden_missing",
    });
  });

  it("a failed golden build reports failed with the reason and leaves nothing running", async () => {
    const spawnedBefore = rig.processes.spawned.length;
    const broken = { ...TEMPLATE, name: "no-image" };
    await expect(rig.executor.buildGolden(broken, new RecordingReporter())).rejects.toMatchObject({
      code: "disk_failed",
    });
    expect(await rig.executor.goldenStatus("no-image")).toMatchObject({
      status: "failed",
      error: expect.stringMatching(/^cp .*no-image\/rootfs.ext4/),
    });
    expect(rig.processes.spawned.length).toBe(spawnedBefore);
    expect(await rig.executor.goldenStatus("never-built")).toMatchObject({ status: "missing" });
  });
});
