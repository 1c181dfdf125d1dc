import { statSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { jailerArgs } from "../../src/vmm/firecracker/jailer.ts";
import { HostLayout } from "../../src/vmm/firecracker/layout.ts";
import { ContractValidator, contractSkipReason, loadDescription } from "./contract.ts";
import type { RecordedRequest } from "./fake-firecracker.ts";
import { makeRig, RecordingReporter, type Rig, TEMPLATE, vmSpec } from "./harness.ts";

const loaded = loadDescription();
const skipReason = contractSkipReason(loaded, "Firecracker parallel restore test");

/**
 * Holds every PUT /snapshot/load until `n` of them are in flight at once. If restores
 * were serialised (a host-wide lock, one staging path), the second load could never
 * arrive while the first is held, and the barrier rejects.
 */
function loadBarrier(n: number, timeoutMs: number) {
  const arrived: string[] = [];
  let open!: () => void;
  const opened = new Promise<void>((resolve) => {
    open = resolve;
  });
  const gate = async (req: RecordedRequest, jailId: string): Promise<void> => {
    if (req.method !== "PUT" || req.path !== "/snapshot/load") return;
    arrived.push(jailId);
    if (arrived.length === n) open();
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`only ${arrived.length} of ${n} snapshot loads in flight`)),
        timeoutMs,
      );
    });
    try {
      await Promise.race([opened, timeout]);
    } finally {
      clearTimeout(timer);
    }
  };
  return { gate, arrived };
}

describe.skipIf(skipReason !== null)("two concurrent restores of one golden snapshot", () => {
  let rig: Rig;
  const barrier = loadBarrier(2, 5_000);

  beforeAll(async () => {
    if (!("doc" in loaded)) return;
    rig = await makeRig(new ContractValidator(loaded.doc), barrier.gate);
    await rig.executor.buildGolden(TEMPLATE, new RecordingReporter());
  });
  afterAll(async () => {
    await rig?.cleanup();
  });

  it("run in parallel in separate jails with identical in-jail paths", async () => {
    const a = vmSpec("amber-delta-0101", 21);
    const b = vmSpec("brisk-ember-0102", 22);
    let finished = 0;
    const both = await Promise.all(
      [a, b].map((spec) =>
        rig.executor.createFromGolden(spec, new RecordingReporter()).then((up) => {
          finished++;
          return up;
        }),
      ),
    );
    // Both loads were held in flight together before either restore finished.
    expect(barrier.arrived.sort()).toEqual(["box-amber-delta-0101", "box-brisk-ember-0102"]);
    expect(finished).toBe(2);
    expect(both.map((up) => up(8000))).toEqual(["10.0.0.31:8000", "10.0.0.32:8000"]);

    const layout = new HostLayout(rig.cfg.stateDir, rig.cfg.chrootBase, "firecracker");
    const [va, vb] = [a, b].map((s) => {
      const v = rig.processes.forJail(`box-${s.slug}`)[0];
      if (!v) throw new Error(`no VMM for ${s.slug}`);
      return v;
    });
    // Distinct chroots, uids and cgroups; otherwise the same command line.
    const uidOf = (args: string[]) => Number(args[args.indexOf("--uid") + 1]);
    expect(uidOf(va!.args)).not.toBe(uidOf(vb!.args));
    for (const [v, spec] of [
      [va!, a],
      [vb!, b],
    ] as const) {
      const uid = uidOf(v.args);
      expect(v.args).toEqual(
        jailerArgs(rig.cfg, { jailId: `box-${spec.slug}`, uid, gid: uid, memoryMb: 2048 }),
      );
      expect(v.fake.calls()).toEqual([
        "PUT /logger",
        "PUT /metrics",
        "PUT /snapshot/load",
        "PUT /mmds",
        "PATCH /vm",
        "PATCH /balloon",
      ]);
      expect(v.fake.requests.every((r) => r.fault === undefined)).toBe(true);
      expect(v.fake.socketPath).toBe(
        path.join(layout.jailRoot(`box-${spec.slug}`), "run/firecracker.socket"),
      );
    }
    expect(va!.fake.socketPath).not.toBe(vb!.fake.socketPath);
    // Identical in-jail paths in every path-bearing request; only the TAP override differs.
    const load = (v: typeof va) =>
      v!.fake.requests.find((r) => r.path === "/snapshot/load")!.body as Record<string, unknown>;
    expect({ ...load(va), network_overrides: null }).toEqual({ ...load(vb), network_overrides: null });
    expect(load(va).network_overrides).toEqual([{ iface_id: "eth0", host_dev_name: "fc-t21" }]);
    expect(load(vb).network_overrides).toEqual([{ iface_id: "eth0", host_dev_name: "fc-t22" }]);
    // Both jails share the golden memory file's inode; each has its own writable disk.
    const inode = (jail: string, p: string) => statSync(layout.inJail(jail, p)).ino;
    expect(inode("box-amber-delta-0101", "/snapshot/mem")).toBe(
      inode("box-brisk-ember-0102", "/snapshot/mem"),
    );
    expect(inode("box-amber-delta-0101", "/rootfs.ext4")).not.toBe(
      inode("box-brisk-ember-0102", "/rootfs.ext4"),
    );
    expect(statSync(layout.inJail("box-amber-delta-0101", "/rootfs.ext4")).uid).toBe(uidOf(va!.args));
    expect(statSync(layout.inJail("box-brisk-ember-0102", "/rootfs.ext4")).uid).toBe(uidOf(vb!.args));
    // Each got its own identity.
    const mmds = (v: typeof va) => v!.fake.requests.find((r) => r.path === "/mmds")!.body;
    expect(mmds(va)).toEqual({ latest: { "meta-data": { devbox: a.metadata } } });
    expect(mmds(vb)).toEqual({ latest: { "meta-data": { devbox: b.metadata } } });
  });
});

describe.skipIf(skipReason !== null)("the in-flight barrier itself", () => {
  let rig: Rig;
  const barrier = loadBarrier(2, 300);

  beforeAll(async () => {
    if (!("doc" in loaded)) return;
    rig = await makeRig(new ContractValidator(loaded.doc), barrier.gate);
    await rig.executor.buildGolden(TEMPLATE, new RecordingReporter());
  });
  afterAll(async () => {
    await rig?.cleanup();
  });

  it("fails a restore that is not accompanied by a second one in flight", async () => {
    await expect(
      rig.executor.createFromGolden(vmSpec("quiet-orchid-0201", 41), new RecordingReporter()),
    ).rejects.toMatchObject({ code: "api_rejected", faultMessage: expect.stringMatching(/only 1 of 2/) });
  });
});
