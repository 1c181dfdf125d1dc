import { type ChildProcess, spawn } from "node:child_process";
import { createWriteStream } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { stringify } from "yaml";
import { ADMIN_EMAIL, ADMIN_PASSWORD } from "./control-plane.ts";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../../..");

/**
 * One control-plane replica as its own OS process (`node --import tsx apps/api/src/main.ts`,
 * as the systemd unit runs it), configured by a YAML file, so replicas do not share an event
 * loop and one can be killed by its PID.
 */
export class ReplicaProcess {
  #child: ChildProcess | null = null;
  #exited: Promise<void> | null = null;

  private constructor(
    readonly url: string,
    readonly dir: string,
    private readonly configFile: string,
  ) {}

  /** `databaseUrl` null: the embedded default, PGlite in the replica's own data directory. */
  static async prepare(
    databaseUrl: string | null,
    port: number,
    extra: Record<string, unknown> = {},
  ): Promise<ReplicaProcess> {
    const dir = await mkdtemp(path.join(tmpdir(), "doppio-replica-"));
    const passwordFile = path.join(dir, "admin-password");
    await writeFile(passwordFile, `${ADMIN_PASSWORD}\n`, { mode: 0o600 });
    const url = `http://127.0.0.1:${port}`;
    const configFile = path.join(dir, "api.yaml");
    await writeFile(
      configFile,
      stringify({
        host: "127.0.0.1",
        port,
        publicUrl: url,
        dataDir: dir,
        ...(databaseUrl ? { databaseUrl } : {}),
        logLevel: "warn",
        adminEmail: ADMIN_EMAIL,
        adminPasswordFile: passwordFile,
        ...extra,
      }),
    );
    return new ReplicaProcess(url, dir, configFile);
  }

  get pid(): number | undefined {
    return this.#child?.pid;
  }

  /** Starts the process and waits until it answers /healthz. */
  async start(): Promise<void> {
    const log = createWriteStream(path.join(this.dir, "api.log"), { flags: "a" });
    const child = spawn(process.execPath, ["--import", "tsx", "apps/api/src/main.ts"], {
      cwd: ROOT,
      env: { ...process.env, DOPPIO_API_CONFIG: this.configFile },
      stdio: ["ignore", "pipe", "pipe"],
    });
    child.stdout!.pipe(log, { end: false });
    child.stderr!.pipe(log, { end: false });
    this.#child = child;
    this.#exited = new Promise((resolve) => child.once("exit", () => resolve()));
    const deadline = Date.now() + 60_000;
    for (;;) {
      if (child.exitCode !== null)
        throw new Error(`replica exited with ${child.exitCode}; see ${this.dir}/api.log`);
      try {
        if ((await fetch(`${this.url}/healthz`)).ok) return;
      } catch {
        // not listening yet
      }
      if (Date.now() > deadline)
        throw new Error(`replica on ${this.url} did not come up; see ${this.dir}/api.log`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  /** Sends `signal` to the replica's PID and waits for it to exit. */
  async kill(signal: NodeJS.Signals = "SIGTERM"): Promise<void> {
    const child = this.#child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    process.kill(child.pid!, signal);
    await this.#exited;
    this.#child = null;
  }

  async remove(): Promise<void> {
    await this.kill();
    await rm(this.dir, { recursive: true, force: true });
  }
}
