import { type ChildProcess, execFile, spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const CLI_ROOT = fileURLToPath(new URL("../..", import.meta.url));
export const BIN = path.join(CLI_ROOT, "bin", "doppio.js");

let built: Promise<void> | null = null;

/** Builds dist/doppio.mjs once per test file, so the tests run what users install. */
export function buildCli(): Promise<void> {
  built ??= new Promise((resolve, reject) => {
    execFile(process.execPath, [path.join(CLI_ROOT, "scripts", "build.mjs")], (err, _out, stderr) =>
      err ? reject(new Error(`build failed: ${stderr}`)) : resolve(),
    );
  });
  return built;
}

interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

interface RunningCli {
  child: ChildProcess;
  stdout(): string;
  stderr(): string;
  /** Resolves when stdout satisfies `done`; rejects after `timeoutMs`. */
  waitForStdout(done: (out: string) => boolean, timeoutMs?: number): Promise<void>;
  exited: Promise<number | null>;
}

export interface CliHome {
  dir: string;
  spawn(args: string[], opts?: { env?: NodeJS.ProcessEnv }): RunningCli;
  configDir: string;
  env: NodeJS.ProcessEnv;
  run(args: string[], opts?: { input?: string; env?: NodeJS.ProcessEnv }): Promise<CliResult>;
  cleanup(): Promise<void>;
}

/** A temporary HOME/XDG_CONFIG_HOME and a runner of the built CLI as a subprocess within it. */
export async function cliHome(): Promise<CliHome> {
  const dir = await mkdtemp(path.join(tmpdir(), "doppio-cli-"));
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    HOME: dir,
    XDG_CONFIG_HOME: path.join(dir, "config"),
    // Quick fallback polling; the event stream is what normally delivers progress.
    DOPPIO_POLL_MS: "500",
  };
  return {
    dir,
    configDir: path.join(dir, "config", "doppio"),
    env,
    run(args, opts = {}) {
      return new Promise((resolve, reject) => {
        const child = spawn(process.execPath, [BIN, ...args], {
          env: { ...env, ...opts.env },
          stdio: ["pipe", "pipe", "pipe"],
        });
        let stdout = "";
        let stderr = "";
        child.stdout.on("data", (d) => {
          stdout += d;
        });
        child.stderr.on("data", (d) => {
          stderr += d;
        });
        child.on("error", reject);
        child.on("close", (code) => resolve({ code, stdout, stderr }));
        child.stdin.end(opts.input ?? "");
      });
    },
    spawn(args, opts = {}) {
      const child = spawn(process.execPath, [BIN, ...args], { env: { ...env, ...opts.env } });
      let stdout = "";
      let stderr = "";
      const waiters = new Set<() => void>();
      child.stdout.on("data", (d) => {
        stdout += d;
        for (const w of waiters) w();
      });
      child.stderr.on("data", (d) => {
        stderr += d;
      });
      const exited = new Promise<number | null>((resolve) => child.on("close", (code) => resolve(code)));
      return {
        child,
        stdout: () => stdout,
        stderr: () => stderr,
        exited,
        waitForStdout(done, timeoutMs = 20_000) {
          return new Promise((resolve, reject) => {
            const check = () => {
              if (!done(stdout)) return;
              cleanup();
              resolve();
            };
            const timer = setTimeout(() => {
              cleanup();
              reject(new Error(`timed out; stdout so far:\n${stdout}\nstderr:\n${stderr}`));
            }, timeoutMs);
            const cleanup = () => {
              clearTimeout(timer);
              waiters.delete(check);
            };
            waiters.add(check);
            check();
          });
        },
      };
    },
    cleanup: () => rm(dir, { recursive: true, force: true }),
  };
}
