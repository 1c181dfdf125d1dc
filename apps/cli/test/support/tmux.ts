import { execFile, spawnSync } from "node:child_process";
import { promisify } from "node:util";

const run = promisify(execFile);

export const hasTmux = spawnSync("tmux", ["-V"]).status === 0;

/** A private tmux server (own socket) with one shell; a real terminal for TTY behaviour. */
export class TmuxSession {
  /** `socketPath` lives in the test's temp dir, so nothing is left in /tmp/tmux-UID. */
  constructor(private readonly socketPath: string) {}

  private tmux(args: string[]) {
    return run("tmux", ["-u", "-S", this.socketPath, ...args]);
  }

  async start(env: Record<string, string>): Promise<void> {
    const envArgs = Object.entries(env).flatMap(([k, v]) => ["-e", `${k}=${v}`]);
    await this.tmux([
      "new-session",
      "-d",
      "-s",
      "t",
      "-x",
      "160",
      "-y",
      "50",
      ...envArgs,
      "bash --norc --noprofile",
    ]);
  }

  async type(text: string, enter = true): Promise<void> {
    await this.tmux(["send-keys", "-t", "t", "-l", text]);
    if (enter) await this.tmux(["send-keys", "-t", "t", "Enter"]);
  }

  async key(name: string): Promise<void> {
    await this.tmux(["send-keys", "-t", "t", name]);
  }

  async screen(): Promise<string> {
    return (await this.tmux(["capture-pane", "-p", "-t", "t"])).stdout;
  }

  async clear(): Promise<void> {
    await this.type("clear");
    await this.tmux(["clear-history", "-t", "t"]);
    await this.waitFor((s) => !s.includes("clear"), 5_000);
  }

  /** Polls the screen until `done` holds; returns every distinct screen seen on the way. */
  async waitFor(done: (screen: string) => boolean, timeoutMs = 30_000): Promise<string[]> {
    const seen: string[] = [];
    const deadline = Date.now() + timeoutMs;
    while (true) {
      const screen = await this.screen();
      if (seen.at(-1) !== screen) seen.push(screen);
      if (done(screen)) return seen;
      if (Date.now() > deadline) {
        throw new Error(`timed out waiting for the terminal; last screen:\n${screen}`);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  async stop(): Promise<void> {
    await this.tmux(["kill-server"]).catch(() => {});
  }
}
