import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import type { Settings } from "./settings.ts";

export interface OutStream {
  write(chunk: string): unknown;
  isTTY?: boolean;
  columns?: number;
}

/** The CLI's edges to the outside world, passed in so tests and other shells can replace them. */
export interface Io {
  stdout: OutStream;
  stderr: OutStream;
  stdinIsTTY: boolean;
  settings: Settings;
  now(): number;
  /** Reads one line from the terminal; `silent` hides what is typed (passwords). */
  prompt(question: string, opts?: { silent?: boolean }): Promise<string>;
  /** Reads all of stdin (for --password-stdin). */
  readStdin(): Promise<string>;
  openBrowser(url: string): Promise<boolean>;
  /** Registers a Ctrl-C handler for the duration of `fn`. */
  onInterrupt<T>(handler: () => void, fn: () => Promise<T>): Promise<T>;
}

export function processIo(settings: Settings): Io {
  return {
    stdout: process.stdout,
    stderr: process.stderr,
    stdinIsTTY: Boolean(process.stdin.isTTY),
    settings,
    now: () => Date.now(),
    prompt: (question, opts) => promptLine(question, opts?.silent ?? false),
    async readStdin() {
      const chunks: Buffer[] = [];
      for await (const chunk of process.stdin) chunks.push(Buffer.from(chunk));
      return Buffer.concat(chunks).toString("utf8");
    },
    openBrowser(url) {
      return new Promise((resolve) => {
        // An argument array, never a shell: the URL is data.
        const child = spawn("xdg-open", [url], { stdio: "ignore", detached: true });
        child.on("error", () => resolve(false));
        child.on("spawn", () => {
          child.unref();
          resolve(true);
        });
      });
    },
    async onInterrupt(handler, fn) {
      process.on("SIGINT", handler);
      try {
        return await fn();
      } finally {
        process.off("SIGINT", handler);
      }
    },
  };
}

function promptLine(question: string, silent: boolean): Promise<string> {
  return new Promise((resolve, reject) => {
    const rl = createInterface({ input: process.stdin, output: process.stderr, terminal: true });
    let muted = false;
    if (silent) {
      // Echo nothing of what is typed once the question is on screen.
      const internal = rl as unknown as { _writeToOutput: (s: string) => void };
      const write = internal._writeToOutput.bind(rl);
      internal._writeToOutput = (s: string) => {
        if (!muted) write(s);
        else if (s.includes("\n") || s.includes("\r")) write("\n");
      };
    }
    let answered = false;
    rl.on("SIGINT", () => {
      rl.close();
      process.stderr.write("\n");
      reject(Object.assign(new Error("interrupted"), { code: "SIGINT" }));
    });
    rl.on("close", () => {
      if (!answered) reject(Object.assign(new Error("no answer"), { code: "EOF" }));
    });
    rl.question(question, (answer) => {
      answered = true;
      rl.close();
      resolve(answer);
    });
    muted = silent;
  });
}
