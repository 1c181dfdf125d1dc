import { existsSync, readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { FAKE_DISK_BYTES, fakeVmmAlive } from "../../support/fake-executor.ts";
import type { Host } from "./cluster.ts";
import { processesInNetns, type VmFacts } from "./host-facts.ts";

/** The fake executor's VMs as its state file records them. */
function fakeState(stateFile: string): Record<string, { state: string; pid?: number }> {
  if (!existsSync(stateFile)) return {};
  return (
    JSON.parse(readFileSync(stateFile, "utf8")) as { vms: Record<string, { state: string; pid?: number }> }
  ).vms;
}

/** The fake VMM processes a host's state file names (running VMs), by PID. */
export function fakeVmmPids(stateFile: string): Array<{ slug: string; pid: number }> {
  return Object.entries(fakeState(stateFile))
    .filter(([, vm]) => vm.pid !== undefined)
    .map(([slug, vm]) => ({ slug, pid: vm.pid! }))
    .sort((a, b) => a.slug.localeCompare(b.slug));
}

/**
 * A fake-executor host's facts: its state file, the `sleep` processes standing for VMMs in
 * its namespace, and its boxes' disk files (a fixed pattern) on the small filesystem.
 */
export function fakeFacts(h: Host): VmFacts {
  const vms = fakeState(h.stateFile);
  const vmmProblems: string[] = [];
  const dataProblems: string[] = [];
  const expected = new Set<number>();
  for (const [slug, vm] of Object.entries(vms)) {
    if (vm.state !== "running") continue;
    if (vm.pid === undefined || !fakeVmmAlive(vm.pid))
      vmmProblems.push(`${slug} on ${h.name} runs without a VMM`);
    else expected.add(vm.pid);
  }
  const found = h.netns ? processesInNetns(h.netns.name, (_, pid) => fakeVmmAlive(pid)) : [];
  for (const pid of found) {
    if (!expected.has(pid)) vmmProblems.push(`VMM process ${pid} on ${h.name} belongs to no running VM`);
  }
  if (h.disks) {
    for (const slug of Object.keys(vms)) {
      const file = path.join(h.disks.dir, `${slug}.img`);
      const bytes = existsSync(file) ? readFileSync(file) : null;
      if (!bytes?.equals(Buffer.alloc(FAKE_DISK_BYTES, 1)))
        dataProblems.push(`${slug}'s disk on ${h.name} is damaged`);
    }
    for (const f of readdirSync(h.disks.dir)) {
      if (!vms[f.replace(/\.img$/, "")]) dataProblems.push(`${f} on ${h.name} belongs to no VM`);
    }
  }
  return { vms, vmms: found.length, vmmProblems, leakProblems: [], dataProblems };
}
