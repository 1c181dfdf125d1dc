import { readdirSync, readFileSync, readlinkSync, statSync } from "node:fs";

/**
 * What a host's VMM side holds at the end of a run, read from the host itself by the
 * backend's gatherer (fake-facts.ts, qemu-facts.ts): the VMs by slug and their state as
 * the agent would see it, and the problems found there (checks.ts reports them).
 */
export interface VmFacts {
  /** Every VM on the host by slug: running, stopped, hibernated, exited. */
  vms: Record<string, { state: string }>;
  /** VMM processes found in the host's namespace. */
  vmms: number;
  /** A running VM without its one live VMM, or a VMM process no running VM owns. */
  vmmProblems: string[];
  /** Host resources (TAPs, firewall entries, routes, box directories) no live box owns. */
  leakProblems: string[];
  /** Damaged or stray disks. */
  dataProblems: string[];
}

/** PIDs of live processes in network namespace `netns` whose /proc/PID/comm passes `match`. */
export function processesInNetns(netns: string, match: (comm: string, pid: number) => boolean): number[] {
  const ns = `net:[${statSync(`/run/netns/${netns}`).ino}]`;
  const pids: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    const pid = Number(entry);
    try {
      if (readlinkSync(`/proc/${pid}/ns/net`) !== ns) continue;
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      const state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
      if (state === "Z" || state === "X") continue;
      if (match(readFileSync(`/proc/${pid}/comm`, "utf8").trim(), pid)) pids.push(pid);
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}
