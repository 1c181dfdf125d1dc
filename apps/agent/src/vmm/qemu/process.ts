import { spawn } from "node:child_process";
import { closeSync, openSync } from "node:fs";
import { readFile, rm } from "node:fs/promises";
import { setTimeout as delay } from "node:timers/promises";
import { INCOMING_FD } from "./confine.ts";
import { QemuError, VmmExitedError } from "./errors.ts";
import { QmpClient } from "./qmp.ts";
import { noRoom, noSpaceError } from "./room.ts";

export interface LaunchOptions {
  qemuBinary: string;
  args: string[];
  /** QEMU's stdout/stderr go here (its errors before QMP is up). */
  logFile: string;
  pidFile: string;
  qmpSocket: string;
  netns: string | null;
  /** A restore's migration stream, opened here and inherited as `INCOMING_FD` (confine.ts). */
  incomingFile?: string;
  /** RLIMIT_NPROC for QEMU (`prlimit`): processes and threads of its uid once it has dropped to it. */
  maxProcesses?: number;
  timeoutMs?: number;
}

/**
 * Starts QEMU detached (own session, not a child the agent must keep) so the agent can
 * restart without killing VMs; returns its pid and a connected QMP client.
 */
export async function launchQemu(o: LaunchOptions): Promise<{ pid: number; qmp: QmpClient }> {
  await rm(o.qmpSocket, { force: true });
  await rm(o.pidFile, { force: true });
  const qemu = o.maxProcesses
    ? ["prlimit", `--nproc=${o.maxProcesses}`, "--", o.qemuBinary, ...o.args]
    : [o.qemuBinary, ...o.args];
  const [file, args] = o.netns ? ["ip", ["netns", "exec", o.netns, ...qemu]] : [qemu[0]!, qemu.slice(1)];
  const fd = openSync(o.logFile, "a");
  let exitInfo: string | null = null;
  let killed = false;
  let incoming: number | null = null;
  try {
    if (o.incomingFile) incoming = openSync(o.incomingFile, "r");
    const stdio: Array<"ignore" | number> = ["ignore", fd, fd];
    if (incoming !== null) stdio[INCOMING_FD] = incoming;
    const child = spawn(file, args, { detached: true, stdio });
    child.once("exit", (code, signal) => {
      exitInfo = `exit ${code ?? signal}`;
      killed = signal !== null;
    });
    child.once("error", (err) => {
      exitInfo = err.message;
    });
    child.unref();
  } finally {
    closeSync(fd);
    if (incoming !== null) closeSync(incoming);
  }
  const deadline = Date.now() + (o.timeoutMs ?? 15_000);
  for (;;) {
    if (exitInfo) {
      const log = await readFile(o.logFile, "utf8").catch(() => "");
      const message = `qemu ended at start (${exitInfo}): ${log.trim().split("\n").slice(-5).join(" | ")}`;
      // Ended by a signal (killed) is not a QEMU that refused its arguments.
      if (killed) throw new VmmExitedError(message);
      // On a full disk QEMU fails to create its files, and its message to the log is lost too.
      if (await noRoom(o.logFile)) {
        throw new QemuError("spawn_failed", `${message}; the host's disk is full`, {
          cause: noSpaceError(o.logFile),
        });
      }
      throw new QemuError("spawn_failed", message);
    }
    const pid = await readPid(o.pidFile);
    if (pid !== null) {
      try {
        const qmp = await QmpClient.connect(o.qmpSocket, 2_000);
        return { pid, qmp };
      } catch (err) {
        if (Date.now() > deadline) throw err;
      }
    }
    if (Date.now() > deadline) throw new QemuError("timeout", "qemu did not come up (no pid file / QMP)");
    await delay(5);
  }
}

export async function readPid(pidFile: string): Promise<number | null> {
  const text = await readFile(pidFile, "utf8").catch(() => "");
  const pid = Number.parseInt(text.trim(), 10);
  return Number.isInteger(pid) && pid > 0 ? pid : null;
}

/**
 * Whether `pid` is a live (non-zombie) process whose command line mentions `marker`
 * (the box's directory), so a recycled pid never counts as the VM.
 */
export async function isVmProcess(pid: number, marker: string): Promise<boolean> {
  const [cmdline, stat] = await Promise.all([
    readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => null),
    readFile(`/proc/${pid}/stat`, "utf8").catch(() => null),
  ]);
  if (cmdline === null || stat === null) return false;
  const state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
  if (state === "Z" || state === "X") return false;
  return cmdline.includes(marker);
}

/** QMP `quit` (brief), then SIGKILL by pid; resolves once the process is gone. */
export async function killVm(pid: number, marker: string, qmpSocket: string): Promise<void> {
  if (!(await isVmProcess(pid, marker))) return;
  try {
    const qmp = await QmpClient.connect(qmpSocket, 500);
    await qmp.execute("quit", undefined, 1_000).catch(() => undefined);
    qmp.close();
  } catch {
    // QMP unreachable: SIGKILL below
  }
  if (await waitGone(pid, marker, 1_000)) return;
  try {
    process.kill(pid, "SIGKILL");
  } catch {
    // already gone
  }
  if (!(await waitGone(pid, marker, 5_000)))
    throw new QemuError("timeout", `qemu pid ${pid} survived SIGKILL`);
}

async function waitGone(pid: number, marker: string, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (!(await isVmProcess(pid, marker))) return true;
    await delay(20);
  }
  return !(await isVmProcess(pid, marker));
}
