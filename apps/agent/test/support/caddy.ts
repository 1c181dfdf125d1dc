import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { HttpCaddyAdmin } from "../../src/edge/caddy-admin.ts";

/** Path of the caddy binary, or null (tests then skip loudly). */
export function findCaddy(): string | null {
  try {
    execFileSync("caddy", ["version"], { stdio: "ignore" });
    return "caddy";
  } catch {
    return null;
  }
}

/**
 * A real Caddy on loopback, started with `caddy run --config <tmp>.json`, its admin API on
 * a unix socket in a temp dir (as the agent runs it), HOME/XDG dirs inside that dir so
 * nothing leaks into the machine.
 */
export class TestCaddy {
  /** As Caddy's config names it (`admin.listen`). */
  readonly adminListen: string;
  /** As the agent's config names it (`caddyAdmin`). */
  readonly adminAddress: string;
  readonly admin: HttpCaddyAdmin;
  readonly #dir: string;
  #proc: ChildProcess | null = null;
  #log = "";

  private constructor(dir: string) {
    this.#dir = dir;
    const socket = join(dir, "admin.sock");
    this.adminListen = `unix/${socket}`;
    this.adminAddress = `unix:${socket}`;
    this.admin = new HttpCaddyAdmin({ address: this.adminAddress });
  }

  static async create(): Promise<TestCaddy> {
    return new TestCaddy(await mkdtemp(join(tmpdir(), "doppio-caddy-")));
  }

  /** A raw admin API call (tests that change Caddy's config behind the agent's back). */
  adminRequest(method: string, path: string, body?: unknown): Promise<{ status: number; text: string }> {
    return new Promise((resolve, reject) => {
      const req = request(
        {
          socketPath: join(this.#dir, "admin.sock"),
          setHost: false,
          method,
          path,
          headers: { host: "", ...(body === undefined ? {} : { "content-type": "application/json" }) },
        },
        (res) => {
          let text = "";
          res.on("data", (c: Buffer) => {
            text += c.toString("utf8");
          });
          res.on("end", () => resolve({ status: res.statusCode ?? 0, text }));
        },
      );
      req.on("error", reject);
      req.end(body === undefined ? undefined : JSON.stringify(body));
    });
  }

  get pid(): number | undefined {
    return this.#proc?.pid;
  }

  /** Output so far, for failure messages. */
  get log(): string {
    return this.#log;
  }

  /** Start with `config` (default: empty apart from the admin listener) and wait for the admin API. */
  async start(config: unknown = { admin: { listen: this.adminListen } }): Promise<void> {
    const file = join(this.#dir, `config-${Date.now()}.json`);
    await writeFile(file, JSON.stringify(config));
    const env = {
      ...process.env,
      HOME: this.#dir,
      XDG_CONFIG_HOME: join(this.#dir, "config"),
      XDG_DATA_HOME: join(this.#dir, "data"),
    };
    const proc = spawn("caddy", ["run", "--config", file], { env, stdio: ["ignore", "pipe", "pipe"] });
    proc.stdout?.on("data", (b: Buffer) => this.#append(b));
    proc.stderr?.on("data", (b: Buffer) => this.#append(b));
    this.#proc = proc;
    const deadline = Date.now() + 15_000;
    while (Date.now() < deadline) {
      if (proc.exitCode !== null) throw new Error(`caddy exited ${proc.exitCode}:\n${this.#log}`);
      if (await this.admin.healthy()) return;
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error(`caddy admin did not come up:\n${this.#log}`);
  }

  /** Stop the process we started, by PID: SIGTERM (or the given signal), then wait for exit. */
  async stop(signal: NodeJS.Signals = "SIGTERM"): Promise<void> {
    const proc = this.#proc;
    this.#proc = null;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = new Promise<void>((r) => proc.once("exit", () => r()));
    process.kill(proc.pid!, signal);
    const timer = setTimeout(
      () => proc.pid && proc.exitCode === null && process.kill(proc.pid, "SIGKILL"),
      5_000,
    );
    await exited;
    clearTimeout(timer);
  }

  async dispose(): Promise<void> {
    await this.stop();
    await rm(this.#dir, { recursive: true, force: true });
  }

  #append(b: Buffer): void {
    this.#log = (this.#log + b.toString("utf8")).slice(-20_000);
  }
}
