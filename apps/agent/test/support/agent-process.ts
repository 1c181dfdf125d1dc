import { type ChildProcess, spawn } from "node:child_process";
import { createWriteStream } from "node:fs";
import { writeFile } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { stringify } from "yaml";
import type { FakeExecutorOptions } from "./fake-executor.ts";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../../..");

/**
 * The agent as its own OS process on the fake executor (`node --import tsx
 * fake-agent-main.ts --config F`: main.ts's runAgent), or with `fake` null the agent
 * program itself (src/main.ts, the configured backend), so a test can SIGKILL exactly that
 * PID. Started like the systemd unit starts main.ts, minus the npx and tsx wrapper processes
 * that would otherwise stand between the test and the agent.
 */
export class AgentProcess {
  #child: ChildProcess | null = null;
  #exited: Promise<number | null> | null = null;

  private constructor(
    readonly configFile: string,
    readonly logFile: string,
    /** The fake executor's options; null runs src/main.ts with the config's real backend. */
    readonly fake: FakeExecutorOptions | null,
    /** A network namespace (of the test's) the process runs in, as if on its own host. */
    readonly netns?: string,
  ) {}

  /** Writes `config` to `dir`/agent.yaml; the process's output goes to `dir`/agent.log. */
  static async prepare(
    dir: string,
    config: Record<string, unknown>,
    fake: FakeExecutorOptions | null,
    netns?: string,
  ): Promise<AgentProcess> {
    const configFile = path.join(dir, "agent.yaml");
    await writeFile(configFile, stringify(config));
    return new AgentProcess(configFile, path.join(dir, "agent.log"), fake, netns);
  }

  get pid(): number | undefined {
    return this.#child?.pid;
  }

  start(): void {
    const log = createWriteStream(this.logFile, { flags: "a" });
    const node = [
      process.execPath,
      "--import",
      "tsx",
      this.fake ? "apps/agent/test/support/fake-agent-main.ts" : "apps/agent/src/main.ts",
      "--config",
      this.configFile,
    ];
    // `ip netns exec` execs node in place: the PID stays the agent's.
    const [file, ...args] = this.netns ? ["ip", "netns", "exec", this.netns, ...node] : node;
    const child = spawn(file!, args, {
      cwd: ROOT,
      env: this.fake ? { ...process.env, DOPPIO_TEST_FAKE_EXECUTOR: JSON.stringify(this.fake) } : process.env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    child.stdout!.pipe(log, { end: false });
    child.stderr!.pipe(log, { end: false });
    this.#child = child;
    this.#exited = new Promise((resolve) => child.once("exit", (code) => resolve(code)));
  }

  /** Sends `signal` to the agent's PID and waits for it to exit. */
  async kill(signal: NodeJS.Signals): Promise<number | null> {
    const child = this.#child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return child?.exitCode ?? null;
    process.kill(child.pid!, signal);
    const code = await this.#exited;
    this.#child = null;
    return code;
  }
}
