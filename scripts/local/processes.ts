import { type ChildProcess, spawn } from "node:child_process";
import { createWriteStream, existsSync, readFileSync, writeFileSync } from "node:fs";
import { rm } from "node:fs/promises";

/** The processes `make up` started, by PID, so Ctrl-C and `make down` stop exactly those. */
export interface PidFile {
  pids: Record<string, number>;
}

export function readPids(file: string): PidFile {
  if (!existsSync(file)) return { pids: {} };
  return JSON.parse(readFileSync(file, "utf8")) as PidFile;
}

export function writePids(file: string, pids: PidFile): void {
  writeFileSync(file, `${JSON.stringify(pids, null, 2)}\n`);
}

export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The process's own command line, to make sure a PID still names what we started. */
function cmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ");
  } catch {
    return "";
  }
}

/** Starts a long-running service with its output in a log file; it dies with us on Ctrl-C. */
export function startService(
  name: string,
  cmd: string,
  args: string[],
  opts: { env?: NodeJS.ProcessEnv; log: string },
): ChildProcess {
  const out = createWriteStream(opts.log, { flags: "a" });
  const child = spawn(cmd, args, { env: { ...process.env, ...opts.env }, stdio: ["ignore", "pipe", "pipe"] });
  child.stdout!.pipe(out);
  child.stderr!.pipe(out);
  child.on("exit", (code, signal) => {
    if (!stopping && code !== 0 && signal === null)
      console.error(`${name} exited with code ${code}; see ${opts.log}`);
  });
  return child;
}

let stopping = false;

/** SIGTERM, then SIGKILL after `graceMs`, for each PID that still runs `match`. */
export async function stopPids(
  pids: Record<string, number>,
  match: (name: string, cmd: string) => boolean,
  graceMs = 8000,
) {
  stopping = true;
  const live = Object.entries(pids).filter(([name, pid]) => alive(pid) && match(name, cmdline(pid)));
  for (const [, pid] of live) process.kill(pid, "SIGTERM");
  const deadline = Date.now() + graceMs;
  while (live.some(([, pid]) => alive(pid)) && Date.now() < deadline)
    await new Promise((r) => setTimeout(r, 100));
  for (const [, pid] of live) if (alive(pid)) process.kill(pid, "SIGKILL");
}

export async function waitFor(what: string, check: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      if (await check()) return;
    } catch {
      // not up yet
    }
    if (Date.now() > deadline)
      throw new Error(`${what} did not come up within ${Math.round(timeoutMs / 1000)} s`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

export const removeFile = (file: string) => rm(file, { force: true });
