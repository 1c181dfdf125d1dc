import { execFile } from "node:child_process";
import { CodedError } from "../coded-error.ts";

/** A host command that failed: which one, its exit code and what it said on stderr. */
export class CommandError extends CodedError<"command_failed"> {
  override readonly name = "CommandError";
  readonly file: string;
  readonly args: readonly string[];
  readonly exitCode: number | null;
  readonly stderr: string;

  constructor(
    file: string,
    args: readonly string[],
    exitCode: number | null,
    stderr: string,
    cause?: unknown,
  ) {
    super(
      "command_failed",
      `${file} ${args.join(" ")} failed (exit ${exitCode ?? "?"}): ${stderr.trim().slice(0, 500)}`,
      {
        cause,
      },
    );
    this.file = file;
    this.args = args;
    this.exitCode = exitCode;
    this.stderr = stderr;
  }
}

export interface RunOptions {
  timeoutMs?: number;
  /** Extra environment on top of the agent's. */
  env?: Record<string, string>;
  /** Written to the program's stdin, which is then closed. */
  input?: string;
}

/** Runs a program with an argument array (never a shell) and returns its stdout. */
export function run(file: string, args: readonly string[], opts: RunOptions = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = execFile(
      file,
      args,
      {
        timeout: opts.timeoutMs ?? 60_000,
        maxBuffer: 16 * 1024 * 1024,
        env: opts.env ? { ...process.env, ...opts.env } : process.env,
      },
      (err, stdout, stderr) => {
        if (err) {
          const code = typeof err.code === "number" ? err.code : null;
          reject(new CommandError(file, args, code, String(stderr || err.message), err));
          return;
        }
        resolve(String(stdout));
      },
    );
    if (opts.input !== undefined) child.stdin?.end(opts.input);
  });
}

/**
 * Argument vector that runs `file args` inside network namespace `netns` (tests and the
 * local stack keep the VM network out of the root namespace), or as-is without one.
 */
export function inNetns(netns: string | null, file: string, args: readonly string[]): [string, string[]] {
  return netns ? ["ip", ["netns", "exec", netns, file, ...args]] : [file, [...args]];
}
