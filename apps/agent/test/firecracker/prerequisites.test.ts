import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { firecrackerConfig } from "../../src/vmm/firecracker/config.ts";
import { assertPrerequisites, checkPrerequisites } from "../../src/vmm/firecracker/prerequisites.ts";

describe("Firecracker host prerequisites", () => {
  let dir: string;
  const script = (name: string, out: string) => {
    const file = path.join(dir, name);
    writeFileSync(file, `#!/bin/sh\necho "${out}"\n`, { mode: 0o755 });
    return file;
  };
  const mounts = (cgroup2: string | null) => {
    const file = path.join(dir, `mounts-${cgroup2 ? "v2" : "v1"}`);
    const lines = ["proc /proc proc rw 0 0", "cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0"];
    if (cgroup2) lines.push(`cgroup2 ${cgroup2} cgroup2 rw,nsdelegate 0 0`);
    writeFileSync(file, `${lines.join("\n")}\n`);
    return file;
  };

  beforeAll(() => {
    dir = mkdtempSync(path.join(tmpdir(), "fc-prereq-"));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("on this host (no Firecracker release installed) names each missing binary", async () => {
    const cfg = firecrackerConfig({ stateDir: dir });
    const report = await checkPrerequisites({ firecrackerBin: cfg.firecrackerBin, jailerBin: cfg.jailerBin });
    if (existsSync(cfg.firecrackerBin)) {
      expect(report.firecrackerVersion).toMatch(/^\d+\.\d+\.\d+$/);
    } else {
      expect(report.ok).toBe(false);
      expect(report.problems).toContain(
        `firecracker binary not found at ${cfg.firecrackerBin}: install the Firecracker release (firecracker and jailer) there`,
      );
    }
    if (!existsSync(cfg.jailerBin)) {
      expect(report.problems.some((p) => p.startsWith(`jailer binary not found at ${cfg.jailerBin}`))).toBe(
        true,
      );
    }
    console.info(`prerequisite report on this host:\n- ${report.problems.join("\n- ")}`);
  });

  it("reads versions and flags a firecracker/jailer mismatch", async () => {
    const fc = script("firecracker", "Firecracker v1.16.1");
    const jailerSame = script("jailer", "Jailer v1.16.1");
    const ctrl = path.join(dir, "cg-ok");
    mkdirSync(ctrl);
    writeFileSync(path.join(ctrl, "cgroup.controllers"), "cpuset cpu io memory pids\n");
    const kvm = path.join(dir, "kvm");
    writeFileSync(kvm, "");
    const good = await checkPrerequisites({
      firecrackerBin: fc,
      jailerBin: jailerSame,
      kvmPath: kvm,
      procMounts: mounts(ctrl),
      expectedVersion: "1.16.1",
    });
    expect(good).toMatchObject({
      ok: true,
      problems: [],
      firecrackerVersion: "1.16.1",
      jailerVersion: "1.16.1",
      cgroup2Mount: ctrl,
    });

    const jailerOld = script("jailer-old", "Jailer v1.15.0");
    const bad = await checkPrerequisites({
      firecrackerBin: fc,
      jailerBin: jailerOld,
      kvmPath: kvm,
      procMounts: mounts(ctrl),
    });
    expect(bad.problems).toEqual([`firecracker 1.16.1 and jailer 1.15.0 differ: use both from one release`]);
  });

  it("explains a missing /dev/kvm, cgroup v2 not mounted, and v2 without the memory controller", async () => {
    const fc = script("firecracker", "Firecracker v1.16.1");
    const jailer = script("jailer", "Jailer v1.16.1");
    const noKvm = path.join(dir, "no-kvm");
    const r1 = await checkPrerequisites({
      firecrackerBin: fc,
      jailerBin: jailer,
      kvmPath: noKvm,
      procMounts: mounts(null),
    });
    expect(r1.problems).toEqual([
      `${noKvm} does not exist: the host has no KVM (enable virtualisation or use a bare-metal/nested-capable host)`,
      "cgroup v2 is not mounted: the jailer runs with --cgroup-version 2 (mount cgroup2 at /sys/fs/cgroup)",
    ]);
    const hybrid = path.join(dir, "cg-hybrid");
    mkdirSync(hybrid);
    writeFileSync(path.join(hybrid, "cgroup.controllers"), "\n");
    const kvm = path.join(dir, "kvm");
    writeFileSync(kvm, "");
    const r2 = await checkPrerequisites({
      firecrackerBin: fc,
      jailerBin: jailer,
      kvmPath: kvm,
      procMounts: mounts(hybrid),
    });
    expect(r2.problems).toEqual([
      `cgroup v2 at ${hybrid} lacks controller(s) memory (available: none); they are still bound to cgroup v1: boot with systemd.unified_cgroup_hierarchy=1`,
    ]);
  });

  it("assertPrerequisites throws one error listing every problem", async () => {
    await expect(
      assertPrerequisites({
        firecrackerBin: path.join(dir, "none/firecracker"),
        jailerBin: path.join(dir, "none/jailer"),
      }),
    ).rejects.toMatchObject({
      code: "prerequisite_missing",
      message: expect.stringMatching(/firecracker binary not found[\s\S]*jailer binary not found/),
    });
  });
});
