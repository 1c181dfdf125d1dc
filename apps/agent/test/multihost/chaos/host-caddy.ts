import { type ChildProcess, spawn } from "node:child_process";
import { createWriteStream } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import { request } from "node:http";
import path from "node:path";
import { HttpCaddyAdmin, parseCaddyAdminAddress } from "../../../src/edge/caddy-admin.ts";
import { buildEdgeConfig, canonicalJson } from "../../../src/edge/caddy-config.ts";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * A host's real Caddy, in the host's network namespace, started the way its unit starts it:
 * with only the admin listener (a unix socket in the host's data dir); the agent loads the
 * edge config into it. `kill9()` is the fault; `start()` again is systemd's Restart=always.
 */
export class HostCaddy {
  readonly socket: string;
  readonly admin: HttpCaddyAdmin;
  #child: ChildProcess | null = null;
  #exited: Promise<void> = Promise.resolve();

  constructor(
    readonly dir: string,
    readonly netns: string | null,
  ) {
    this.socket = path.join(dir, "caddy-admin.sock");
    this.admin = new HttpCaddyAdmin({ address: this.adminAddress });
  }

  /** As the agent's config names it. */
  get adminAddress(): string {
    return `unix:${this.socket}`;
  }

  get pid(): number | undefined {
    return this.#child?.pid;
  }

  async start(): Promise<void> {
    await mkdir(this.dir, { recursive: true });
    const config = path.join(this.dir, "bootstrap.json");
    await writeFile(config, JSON.stringify({ admin: { listen: `unix/${this.socket}` } }));
    const caddy = ["caddy", "run", "--config", config];
    const [file, ...args] = this.netns ? ["ip", "netns", "exec", this.netns, ...caddy] : caddy;
    const log = createWriteStream(path.join(this.dir, "caddy.log"), { flags: "a" });
    const child = spawn(file!, args, {
      env: {
        ...process.env,
        HOME: this.dir,
        XDG_CONFIG_HOME: path.join(this.dir, "config"),
        XDG_DATA_HOME: path.join(this.dir, "data"),
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    child.stdout!.pipe(log, { end: false });
    child.stderr!.pipe(log, { end: false });
    this.#child = child;
    this.#exited = new Promise((r) => child.once("exit", () => r()));
    for (let i = 0; i < 300; i++) {
      if (child.exitCode !== null)
        throw new Error(`caddy exited ${child.exitCode}; see ${this.dir}/caddy.log`);
      if (await this.admin.healthy()) return;
      await sleep(50);
    }
    throw new Error(`caddy's admin API did not come up; see ${this.dir}/caddy.log`);
  }

  /** Sends `signal` to Caddy's PID and waits for it to exit. */
  async kill(signal: NodeJS.Signals): Promise<void> {
    const child = this.#child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    process.kill(child.pid!, signal);
    await this.#exited;
    this.#child = null;
  }
}

/** What the agent's edge config is for a host (main.ts's buildEdge, same inputs). */
export function expectedEdgeConfig(opts: {
  domain: string;
  caddyAdmin: string;
  agentListen: string;
  edgeListen: string;
  dataDir: string;
}): string {
  return canonicalJson(
    buildEdgeConfig({
      domain: opts.domain,
      adminListen: parseCaddyAdminAddress(opts.caddyAdmin)!.listen,
      agentDial: opts.agentListen,
      tls: { mode: "http", listen: opts.edgeListen },
      storageDir: `${opts.dataDir}/caddy`,
    }),
  );
}

/** A GET through a host's edge for `host`: the status Caddy (and the agent behind it) answers. */
export function edgeStatus(edge: string, host: string): Promise<number> {
  const [hostname, port] = [
    edge.slice(0, edge.lastIndexOf(":")),
    Number(edge.slice(edge.lastIndexOf(":") + 1)),
  ];
  return new Promise((resolve, reject) => {
    const req = request(
      { hostname, port, path: "/", method: "GET", headers: { host }, timeout: 5_000 },
      (res) => {
        res.resume();
        res.on("end", () => resolve(res.statusCode ?? 0));
      },
    );
    req.on("timeout", () => req.destroy(new Error("edge request timed out")));
    req.on("error", reject);
    req.end();
  });
}
