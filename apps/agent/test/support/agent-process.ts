import { type ChildProcess, spawn } from "node:child_process";
import { createWriteStream } from "node:fs";
import { writeFile } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { stringify } from "yaml";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../../..");

/**
 * The agent as its own OS process (`node --import tsx apps/agent/src/main.ts --config F`),
 * so a test can SIGKILL exactly that PID. Same entry point as `npx tsx`, minus the npx and
 * tsx wrapper processes that would otherwise stand between the test and the agent.
 */
export class AgentProcess {
  #child: ChildProcess | null = null;
  #exited: Promise<number | null> | null = null;

  private constructor(
    readonly configFile: string,
    readonly logFile: string,
  ) {}

  static async prepare(dataDir: string, config: Record<string, unknown>): Promise<AgentProcess> {
    const configFile = path.join(dataDir, "agent.yaml");
    await writeFile(configFile, stringify(config));
    return new AgentProcess(configFile, path.join(dataDir, "agent.log"));
  }

  get pid(): number | undefined {
    return this.#child?.pid;
  }

  start(): void {
    const log = createWriteStream(this.logFile, { flags: "a" });
    const child = spawn(
      process.execPath,
      ["--import", "tsx", "apps/agent/src/main.ts", "--config", this.configFile],
      {
        cwd: ROOT,
        env: { ...process.env, DOPPIO_AGENT_ALLOW_FAKE: "1" },
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
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
