import { execFileSync } from "node:child_process";
import { chownSync, existsSync, readdirSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import pg from "pg";

const PG_ROOT = "/usr/lib/postgresql";

/** Why a private PostgreSQL cannot be started here, or null. */
export function privatePostgresUnavailable(): string | null {
  if (process.getuid?.() !== 0) return "starting a private PostgreSQL as the postgres user needs root";
  if (!existsSync(PG_ROOT) || readdirSync(PG_ROOT).length === 0) return `no PostgreSQL under ${PG_ROOT}`;
  return null;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * A PostgreSQL of the chaos run's own: `initdb` into a temp dir, `pg_ctl start` on its own
 * port and socket dir, so the run can crash and restart it without touching the shared
 * cluster. `crash()` is an immediate shutdown (SIGQUIT to the postmaster: no checkpoint,
 * crash recovery at the next start); `close()` stops it by its PID and removes the dir.
 */
export class PrivatePostgres {
  private constructor(
    readonly dir: string,
    readonly port: number,
    private readonly bin: string,
  ) {}

  get dataDir(): string {
    return path.join(this.dir, "data");
  }

  /** The database the control plane uses. */
  get url(): string {
    return `postgres://postgres@127.0.0.1:${this.port}/doppio`;
  }

  static async start(port: number): Promise<PrivatePostgres> {
    const version = readdirSync(PG_ROOT)
      .sort((a, b) => Number(a) - Number(b))
      .at(-1)!;
    const dir = await mkdtemp(path.join(tmpdir(), "doppio-chaos-pg-"));
    const owner = execFileSync("id", ["-u", "postgres"]).toString().trim();
    const group = execFileSync("id", ["-g", "postgres"]).toString().trim();
    chownSync(dir, Number(owner), Number(group));
    const p = new PrivatePostgres(dir, port, path.join(PG_ROOT, version, "bin"));
    try {
      p.#asPostgres("initdb", ["-D", p.dataDir, "-A", "trust", "-U", "postgres", "--no-sync"]);
      await p.startServer();
      const c = new pg.Client({ connectionString: `postgres://postgres@127.0.0.1:${port}/postgres` });
      await c.connect();
      await c.query("CREATE DATABASE doppio");
      await c.end();
      return p;
    } catch (err) {
      await p.close();
      throw err;
    }
  }

  /** The postmaster's PID from its pid file, or null when it is not running. */
  get pid(): number | null {
    const file = path.join(this.dataDir, "postmaster.pid");
    if (!existsSync(file)) return null;
    const pid = Number(readFileSync(file, "utf8").split("\n")[0]);
    return pid > 0 && alive(pid) ? pid : null;
  }

  async startServer(): Promise<void> {
    const opts = [
      `-p ${this.port}`,
      `-k ${this.dir}`,
      "-c listen_addresses=127.0.0.1",
      "-c shared_buffers=16MB",
      "-c max_connections=100",
    ].join(" ");
    this.#asPostgres("pg_ctl", [
      "-D",
      this.dataDir,
      "-l",
      path.join(this.dir, "log"),
      "-o",
      opts,
      "-w",
      "start",
    ]);
  }

  /** Immediate shutdown of the postmaster (its children go with it); waits until it is gone. */
  async crash(): Promise<void> {
    await this.#signal("SIGQUIT");
  }

  async close(): Promise<void> {
    await this.#signal("SIGINT").catch(() => {});
    await rm(this.dir, { recursive: true, force: true });
  }

  async #signal(signal: NodeJS.Signals): Promise<void> {
    const pid = this.pid;
    if (pid === null) return;
    process.kill(pid, signal);
    for (let i = 0; i < 300 && alive(pid); i++) await sleep(100);
    if (alive(pid)) throw new Error(`postmaster ${pid} did not exit on ${signal}`);
  }

  #asPostgres(tool: string, args: string[]): void {
    execFileSync("runuser", ["-u", "postgres", "--", path.join(this.bin, tool), ...args], { stdio: "pipe" });
  }
}
