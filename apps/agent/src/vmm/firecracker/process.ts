import { spawn } from "node:child_process";
import { closeSync, openSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { FirecrackerError } from "./errors.ts";

export interface SpawnRequest {
  command: string;
  args: string[];
  /** Host file that receives stdout and stderr (the guest serial console). */
  logPath: string;
}

/**
 * Starting and watching VMM processes. The real implementation spawns the jailer; tests
 * record the command lines and start a contract-checking API server instead.
 */
export interface VmmProcesses {
  spawn(req: SpawnRequest): Promise<{ pid: number }>;
  /** True while `pid` runs and is still the VMM of jail `jailId` (guards against pid reuse). */
  isAlive(pid: number, jailId: string): Promise<boolean>;
  kill(pid: number, signal: "SIGTERM" | "SIGKILL"): Promise<void>;
}

/** Spawns the jailer detached (it execs Firecracker in place, so the pid stays the VMM's). */
export class HostProcesses implements VmmProcesses {
  spawn(req: SpawnRequest): Promise<{ pid: number }> {
    const fd = openSync(req.logPath, "a", 0o640);
    return new Promise((resolve, reject) => {
      const child = spawn(req.command, req.args, { detached: true, stdio: ["ignore", fd, fd] });
      child.once("error", (err) => {
        closeSync(fd);
        reject(
          new FirecrackerError("spawn_failed", `cannot start ${req.command}: ${err.message}`, { cause: err }),
        );
      });
      child.once("spawn", () => {
        closeSync(fd);
        child.unref();
        if (child.pid === undefined)
          reject(new FirecrackerError("spawn_failed", `${req.command} has no pid`));
        else resolve({ pid: child.pid });
      });
    });
  }

  async isAlive(pid: number, jailId: string): Promise<boolean> {
    try {
      const stat = await readFile(`/proc/${pid}/stat`, "utf8");
      // Field 3 (after the parenthesised comm) is the state; Z and X are dead.
      const state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
      if (state === "Z" || state === "X") return false;
      const argv = (await readFile(`/proc/${pid}/cmdline`, "utf8")).split("\0");
      return argv.some((a, i) => a === `--id=${jailId}` || (a === "--id" && argv[i + 1] === jailId));
    } catch {
      return false;
    }
  }

  async kill(pid: number, signal: "SIGTERM" | "SIGKILL"): Promise<void> {
    try {
      process.kill(pid, signal);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ESRCH") throw err;
    }
  }
}
