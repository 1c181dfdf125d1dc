import { execFile } from "node:child_process";
import { constants } from "node:fs";
import { access, open, readFile } from "node:fs/promises";
import path from "node:path";
import { promisify } from "node:util";
import { FirecrackerError } from "./errors.ts";

const run = promisify(execFile);

export interface PrerequisiteInput {
  firecrackerBin: string;
  jailerBin: string;
  kvmPath?: string;
  procMounts?: string;
  /** cgroup v2 controllers the jailer will write (memory.max needs `memory`). */
  cgroupControllers?: string[];
  /** When set, both binaries must report exactly this version (e.g. "1.16.1"). */
  expectedVersion?: string;
}

export interface PrerequisiteReport {
  ok: boolean;
  problems: string[];
  firecrackerVersion: string | null;
  jailerVersion: string | null;
  cgroup2Mount: string | null;
}

async function binaryVersion(bin: string, name: string, problems: string[]): Promise<string | null> {
  try {
    await access(bin, constants.X_OK);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    problems.push(
      code === "ENOENT"
        ? `${name} binary not found at ${bin}: install the Firecracker release (firecracker and jailer) there`
        : `${name} binary at ${bin} is not executable (${code})`,
    );
    return null;
  }
  try {
    const { stdout } = await run(bin, ["--version"], { timeout: 5_000 });
    const m = /v?(\d+\.\d+\.\d+)/.exec(stdout);
    if (!m?.[1]) {
      problems.push(`${name} at ${bin} printed no version: ${JSON.stringify(stdout.slice(0, 120))}`);
      return null;
    }
    return m[1];
  } catch (err) {
    problems.push(`${name} at ${bin} --version failed: ${(err as Error).message}`);
    return null;
  }
}

/**
 * What the Firecracker backend needs from a host, checked once at agent start. Every
 * failure is one sentence naming the thing and the fix; nothing is repaired here.
 */
export async function checkPrerequisites(input: PrerequisiteInput): Promise<PrerequisiteReport> {
  const problems: string[] = [];
  const firecrackerVersion = await binaryVersion(input.firecrackerBin, "firecracker", problems);
  const jailerVersion = await binaryVersion(input.jailerBin, "jailer", problems);
  if (!path.basename(input.firecrackerBin).includes("firecracker")) {
    problems.push(
      `the jailer only execs files whose name contains "firecracker"; got ${input.firecrackerBin}`,
    );
  }
  if (firecrackerVersion && jailerVersion && firecrackerVersion !== jailerVersion) {
    problems.push(
      `firecracker ${firecrackerVersion} and jailer ${jailerVersion} differ: use both from one release`,
    );
  }
  if (input.expectedVersion && firecrackerVersion && firecrackerVersion !== input.expectedVersion) {
    problems.push(
      `firecracker is ${firecrackerVersion}, the agent is built against ${input.expectedVersion}`,
    );
  }

  const kvm = input.kvmPath ?? "/dev/kvm";
  try {
    const fh = await open(kvm, "r+");
    await fh.close();
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    problems.push(
      code === "ENOENT"
        ? `${kvm} does not exist: the host has no KVM (enable virtualisation or use a bare-metal/nested-capable host)`
        : `${kvm} cannot be opened read-write (${code}): run the agent as root or in the kvm group`,
    );
  }

  let cgroup2Mount: string | null = null;
  try {
    const mounts = await readFile(input.procMounts ?? "/proc/mounts", "utf8");
    cgroup2Mount =
      mounts
        .split("\n")
        .map((l) => l.split(" "))
        .find((f) => f[2] === "cgroup2")?.[1] ?? null;
  } catch (err) {
    problems.push(`cannot read mount table: ${(err as Error).message}`);
  }
  if (!cgroup2Mount) {
    problems.push(
      "cgroup v2 is not mounted: the jailer runs with --cgroup-version 2 (mount cgroup2 at /sys/fs/cgroup)",
    );
  } else {
    const wanted = input.cgroupControllers ?? ["memory"];
    const available = (await readFile(path.join(cgroup2Mount, "cgroup.controllers"), "utf8").catch(() => ""))
      .trim()
      .split(/\s+/)
      .filter(Boolean);
    const missing = wanted.filter((c) => !available.includes(c));
    if (missing.length > 0) {
      problems.push(
        `cgroup v2 at ${cgroup2Mount} lacks controller(s) ${missing.join(", ")} (available: ${available.join(" ") || "none"}); ` +
          "they are still bound to cgroup v1: boot with systemd.unified_cgroup_hierarchy=1",
      );
    }
  }
  return { ok: problems.length === 0, problems, firecrackerVersion, jailerVersion, cgroup2Mount };
}

export async function assertPrerequisites(input: PrerequisiteInput): Promise<PrerequisiteReport> {
  const report = await checkPrerequisites(input);
  if (!report.ok) {
    throw new FirecrackerError(
      "prerequisite_missing",
      `Firecracker host is not ready:\n- ${report.problems.join("\n- ")}`,
    );
  }
  return report;
}
