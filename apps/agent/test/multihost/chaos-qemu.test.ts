import { describe, expect, it } from "vitest";
import { qemuModeUnavailable } from "./chaos/cluster.ts";
import { runChaos } from "./chaos/run.ts";

// Real guests need root (namespaces, TAPs, nftables), QEMU, the image tools and Caddy; CI has them.
const why = qemuModeUnavailable();
if (why) console.warn(`SKIPPING the chaos run on QEMU: ${why}`);

/**
 * The chaos run on real QEMU guests (`npm run chaos -- --backend qemu` for long runs): the
 * agent program (src/main.ts) on two hosts in their own namespaces, each with its bridge,
 * TAPs and firewall and a golden snapshot built through the control plane; kill -9 of an
 * agent, a replica, a guest's qemu-system process and Caddy, a cut link, a PostgreSQL
 * crash and a host's data dir filled up (an ext4 of its own); then every end check, read from the hosts themselves (qemu-facts.ts).
 */
describe.skipIf(why !== null)("chaos on QEMU guests (small, fixed seed)", () => {
  it("loses no job, applies none twice, converges, leaks no VM, TAP, firewall entry or route", async () => {
    const lines: string[] = [];
    const summary = await runChaos({
      jobs: 8,
      seed: 42,
      hosts: 2,
      backend: "qemu",
      log: (l) => lines.push(l),
    });
    console.log(lines.join("\n"));
    const kinds = [
      "kill-agent",
      "kill-replica",
      "kill-vmm",
      "cut-network",
      "kill-caddy",
      "restart-postgres",
      "disk-full",
    ];
    expect(summary.plan.map((p) => p.kind)).toEqual(expect.arrayContaining(kinds));
    expect(summary.injected.length).toBe(summary.plan.length);
    // A guest's write met the full disk: its QEMU paused it (the end checks want it running again).
    expect(lines.join("\n")).toMatch(
      /disk-full #\d+: \S+'s guest wrote \d+ bytes: no answer; its VM is io-error/,
    );
    // A real qemu-system process of a running box was killed (not skipped for want of one).
    expect(summary.injected.join("\n")).toMatch(/kill-vmm \(\S+'s VMM, pid \d+/);
    expect(summary.checks.map((c) => c.name)).toEqual(
      expect.arrayContaining([
        "no leaked VM, IP allocation, TAP, firewall entry, route or box directory on any host",
        "every running VM has its VMM process, and no other runs",
      ]),
    );
    for (const c of summary.checks) expect(c, c.detail).toMatchObject({ ok: true });
  }, 600_000);
});
