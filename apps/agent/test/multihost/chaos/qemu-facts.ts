import { execFile, execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { FIREWALL_TABLE, parsePortSet } from "../../../src/net/firewall.ts";
import { TAP_PREFIX } from "../../../src/net/naming.ts";
import { savedMemory } from "../../../src/vmm/qemu/hibernate.ts";
import { vmStatus } from "../../../src/vmm/qemu/io-pause.ts";
import { boxesDir, boxPaths } from "../../../src/vmm/qemu/layout.ts";
import { isVmProcess, readPid } from "../../../src/vmm/qemu/process.ts";
import { type BoxRecord, readJson } from "../../../src/vmm/qemu/records.ts";
import type { Host } from "./cluster.ts";
import { processesInNetns, type VmFacts } from "./host-facts.ts";

/** The QEMU executor's data dir under the agent's (vmm/qemu/backend.ts). */
const qemuDataDir = (h: Pick<Host, "dataDir">) => path.join(h.dataDir, "qemu");

const inNs = (h: Pick<Host, "netns">, file: string, args: string[]) =>
  execFileSync("ip", ["netns", "exec", h.netns!.name, file, ...args], { encoding: "utf8", timeout: 20_000 });

/** A box's VM as the QEMU executor sees it (executor.ts #state), with its record and live PID. */
async function qemuVm(dataDir: string, slug: string) {
  const paths = boxPaths(dataDir, slug);
  const record = await readJson<BoxRecord>(paths.record);
  const pid = await readPid(paths.pid);
  const live = pid !== null && (await isVmProcess(pid, record?.processDir ?? paths.dir));
  const state = live
    ? "running"
    : (await savedMemory(paths))
      ? "hibernated"
      : existsSync(paths.stopped)
        ? "stopped"
        : existsSync(paths.overlay)
          ? "exited"
          : "gone";
  return { slug, paths, record, pid: live ? pid : null, state };
}

/** The running VMs' QEMU processes on a host, sorted by slug (what a kill-vmm picks from). */
export async function qemuVmmPids(h: Pick<Host, "dataDir">): Promise<Array<{ slug: string; pid: number }>> {
  const dir = boxesDir(qemuDataDir(h));
  const slugs = existsSync(dir) ? readdirSync(dir).sort() : [];
  const out: Array<{ slug: string; pid: number }> = [];
  for (const slug of slugs) {
    const vm = await qemuVm(qemuDataDir(h), slug).catch(() => null);
    if (vm?.pid) out.push({ slug, pid: vm.pid });
  }
  return out;
}

/** The size of a guest's write on a full disk: far more than its page cache holds back. */
const FULL_DISK_WRITE_BYTES = 8 * 1024 * 1024;

/** A guest paused on a full disk (its QEMU's `io-error`): its box and QMP socket. */
export interface PausedGuest {
  slug: string;
  qmp: string;
}

/**
 * On a host whose data dir was just filled: the running box `slug`'s guest stores
 * FULL_DISK_WRITE_BYTES on its data volume (the minimal image's /cgi-bin/data, from the
 * host's namespace), which QEMU cannot allocate, so it pauses the guest. Says what the write
 * answered and the VM's QEMU status afterwards, and returns the guest if it paused.
 */
export async function writeIntoGuestOnFullDisk(
  h: Pick<Host, "dataDir" | "netns">,
  slug: string,
): Promise<{ said: string; paused: PausedGuest | null }> {
  const { record, paths } = await qemuVm(qemuDataDir(h), slug);
  if (!record?.tap) return { said: `${slug} has no TAP to write through`, paused: null };
  const dir = mkdtempSync(path.join(tmpdir(), "dbx-chaos-write-"));
  const body = path.join(dir, "body");
  writeFileSync(body, Buffer.alloc(FULL_DISK_WRITE_BYTES, 65));
  // Not execFileSync: under TCG the guest may take seconds, and the run's other work goes on meanwhile.
  let answer: string;
  try {
    const url = `http://${record.ip}:8000/cgi-bin/data`;
    const curl = ["curl", "-sS", "--fail", "--max-time", "10", "--data-binary", `@${body}`, url];
    answer = (await promisify(execFile)("ip", ["netns", "exec", h.netns!.name, ...curl])).stdout.trim();
  } catch {
    answer = "no answer";
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  // A guest that did not answer may still be writing (a loaded host): its pause can come later.
  let status = "";
  for (const deadline = Date.now() + 10_000; ; await new Promise((r) => setTimeout(r, 200))) {
    status = await vmStatus(paths.qmp).catch((err: Error) => `QMP: ${err.message}`);
    if (status === "io-error" || answer !== "no answer" || Date.now() > deadline) break;
  }
  return {
    said: `${slug}'s guest wrote ${FULL_DISK_WRITE_BYTES} bytes: ${answer}; its VM is ${status}`,
    paused: status === "io-error" ? { slug, qmp: paths.qmp } : null,
  };
}

/**
 * After the disk is freed: waits up to `ms` for a paused guest's VM to run again (the agent's
 * reconcile lets it) and says how that went; `stuck` when it is still paused then. A VM that
 * is gone (the workload stopped or deleted its box meanwhile) proves nothing either way.
 */
export async function waitGuestRunsAgain(
  g: PausedGuest,
  ms: number,
): Promise<{ said: string; stuck: boolean }> {
  const started = Date.now();
  let status = "";
  for (;;) {
    status = await vmStatus(g.qmp).catch(() => "gone");
    const s = ((Date.now() - started) / 1000).toFixed(1);
    if (status === "running") return { said: `${g.slug}'s VM runs again after ${s} s`, stuck: false };
    if (status === "gone")
      return { said: `${g.slug}'s VM is gone (its box stopped meanwhile)`, stuck: false };
    if (Date.now() - started > ms)
      return { said: `${g.slug}'s VM is still ${status} after ${s} s`, stuck: true };
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Every qemu-system process in the host's namespace (the agent's VMMs and golden builds run there). */
export function qemuProcesses(h: Pick<Host, "netns">): number[] {
  return processesInNetns(h.netns!.name, (comm) => comm.startsWith("qemu-system"));
}

/**
 * A QEMU host's facts, read where the agent reads them: the box directories under its
 * data dir (record, pid file checked against /proc, saved memory, stopped marker), the
 * qemu-system processes in the host's namespace, the TAPs (`ip -n`), the isolation
 * firewall's `ports` set (`nft`), the namespace's routes, the stopped boxes' disks
 * (`qemu-img check` on the overlay, `e2fsck -n` on the volume), and each running VM's QEMU
 * status (a guest left paused, say on a disk that was full, is a VMM problem).
 */
export async function qemuFacts(
  h: Pick<Host, "name" | "dataDir" | "netns">,
  live: Set<string>,
): Promise<VmFacts> {
  const dataDir = qemuDataDir(h);
  const dir = boxesDir(dataDir);
  const vms: VmFacts["vms"] = {};
  const vmmProblems: string[] = [];
  const leakProblems: string[] = [];
  const dataProblems: string[] = [];
  const running = new Map<number, string>();
  const wantTaps = new Map<string, { mac: string; ip: string; slug: string }>();
  for (const slug of existsSync(dir) ? readdirSync(dir).sort() : []) {
    const vm = await qemuVm(dataDir, slug);
    if (!live.has(slug))
      leakProblems.push(`box directory ${slug} on ${h.name} (${vm.state}) belongs to no live box`);
    if (vm.state === "gone") {
      leakProblems.push(`box directory ${slug} on ${h.name} holds no disks`);
      continue;
    }
    vms[slug] = { state: vm.state };
    if (vm.state === "running") {
      running.set(vm.pid!, slug);
      const status = await vmStatus(vm.paths.qmp).catch((err: Error) => `unknown (${err.message})`);
      if (status !== "running") vmmProblems.push(`${slug} on ${h.name}: its VM is ${status}, not running`);
      if (vm.record?.tap) wantTaps.set(vm.record.tap, { mac: vm.record.mac, ip: vm.record.ip, slug });
      else vmmProblems.push(`${slug} on ${h.name} runs without a TAP in its record`);
    }
    if (vm.state === "stopped") {
      try {
        execFileSync("qemu-img", ["check", "-q", vm.paths.overlay], { stdio: "pipe", timeout: 60_000 });
      } catch (err) {
        dataProblems.push(`${slug}'s overlay on ${h.name}: ${(err as Error).message.split("\n")[0]}`);
      }
      if (existsSync(vm.paths.volume)) {
        try {
          execFileSync("e2fsck", ["-fn", vm.paths.volume], { stdio: "pipe", timeout: 120_000 });
        } catch (err) {
          dataProblems.push(`${slug}'s volume on ${h.name}: ${(err as Error).message.split("\n")[0]}`);
        }
      }
    }
  }
  const found = qemuProcesses(h);
  for (const pid of found) {
    if (!running.has(pid)) vmmProblems.push(`qemu process ${pid} on ${h.name} belongs to no running VM`);
  }

  const links = JSON.parse(inNs(h, "ip", ["-j", "link", "show"])) as Array<{ ifname: string }>;
  const taps = links.map((l) => l.ifname).filter((n) => n.startsWith(TAP_PREFIX));
  for (const tap of taps)
    if (!wantTaps.has(tap)) leakProblems.push(`TAP ${tap} on ${h.name} belongs to no running VM`);
  for (const [tap, want] of wantTaps) {
    if (!taps.includes(tap)) vmmProblems.push(`${want.slug} on ${h.name} runs without its TAP ${tap}`);
  }
  const ports = parsePortSet(inNs(h, "nft", ["-j", "list", "set", "bridge", FIREWALL_TABLE, "ports"]));
  for (const p of ports) {
    const want = wantTaps.get(p.tap);
    if (!want || want.mac !== p.mac || want.ip !== p.ip)
      leakProblems.push(`firewall entry ${p.tap} ${p.mac} ${p.ip} on ${h.name} belongs to no running VM`);
  }
  for (const [tap, want] of wantTaps) {
    if (!ports.some((p) => p.tap === tap))
      vmmProblems.push(`${want.slug} on ${h.name}: TAP ${tap} not in the firewall`);
  }
  // IPv4: the bridge's subnet and the link to the control plane route; a box adds none of its own.
  const routes = JSON.parse(inNs(h, "ip", ["-4", "-j", "route", "show", "table", "all"])) as Array<{
    dst: string;
    dev?: string;
    type?: string;
  }>;
  for (const r of routes) {
    if (r.dev?.startsWith(TAP_PREFIX)) leakProblems.push(`route ${r.dst} via TAP ${r.dev} on ${h.name}`);
  }
  const unicast = routes.filter((r) => (r.type ?? "unicast") === "unicast" && r.dst !== "default");
  const devs = new Set(unicast.map((r) => r.dev));
  if (unicast.length > devs.size) {
    leakProblems.push(
      `${h.name} has extra routes: ${unicast.map((r) => `${r.dst} dev ${r.dev}`).join(", ")}`,
    );
  }
  return { vms, vmms: found.length, vmmProblems, leakProblems, dataProblems };
}
