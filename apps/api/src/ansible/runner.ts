import { type ChildProcess, execFile, spawn } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { createInterface } from "node:readline";
import { setTimeout as sleep } from "node:timers/promises";
import { promisify } from "node:util";
import type { PlayCounters, PlayKind, ServerStatus } from "@doppio/contracts";
import { and, eq, inArray, isNull, sql } from "drizzle-orm";
import type { Ctx } from "../context.ts";
import { ansiblePlays, ansibleTasks, serverSsh, servers } from "../db/schema.ts";
import type { CallbackEvent } from "./events.ts";
import { parseEvent } from "./events.ts";
import { killGroup, playWorkDir, settleTasks } from "./recovery.ts";
import type { SshKey } from "./ssh-key.ts";
import { toPlays, toTask } from "./views.ts";

export interface PlayLaunch {
  playId: string;
  kind: PlayKind;
  playbook: string;
  serverId: string;
  serverName: string;
  /** Every input of the play, secrets included (written to a 0600 file, never to argv). */
  vars: Record<string, unknown>;
  /** Values scrubbed from everything stored (task output, errors). */
  secrets: string[];
  /** Pinned known_hosts lines; null: trust and record the key on first contact. */
  hostKeys: string | null;
}

interface Running {
  launch: PlayLaunch;
  child: ChildProcess;
  workDir: string;
  cancelled: boolean;
  /** The control plane is stopping: the play ends `failure: interrupted`. */
  interrupted: boolean;
  /** Settles once the play's end is recorded and its leftovers are cleaned up. */
  done: Promise<void>;
  /** Events are applied to the database one after the other, in order. */
  queue: Promise<void>;
  lastPosition: number;
  firstFailure: string | null;
  stats: PlayCounters | null;
  stderr: string;
}

const run = promisify(execFile);
const STDERR_KEEP = 8192;
const KILL_AFTER_MS = 5000;
/** How long cleanup waits for an ssh connection master to exit once asked. */
const MASTER_EXIT_MS = 3000;
/** The statuses a successful play moves to `active` (not `draining`, `disabled`, `archived`). */
const PLAY_MAKES_ACTIVE: ServerStatus[] = ["pending", "preparing", "active", "error"];
/** Environment the child gets from ours: nothing else (no database URL, no tokens). */
const PASSED_ENV = ["PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER", "LOGNAME"];

/**
 * Runs `ansible-playbook` for a play as a child process in its own process group (so cancel
 * stops it and every worker and ssh it started), reads the doppio_jsonl callback's events
 * from its stdout and records them as they come: tasks pre-created from the play's task
 * list, each task's start and result, the stats. Every change goes to the play's SSE topic.
 */
export class PlayRunner {
  private readonly running = new Map<string, Running>();

  constructor(
    private readonly ctx: Ctx,
    private readonly key: SshKey,
  ) {}

  get sshKey(): SshKey {
    return this.key;
  }

  launch(launch: PlayLaunch): void {
    const workDir = playWorkDir(this.ctx.config.dataDir, launch.playId);
    mkdirSync(path.join(workDir, "cp"), { recursive: true, mode: 0o700 });
    const knownHosts = path.join(workDir, "known_hosts");
    writeFileSync(knownHosts, launch.hostKeys ?? "", { mode: 0o600 });
    writeFileSync(path.join(workDir, "inventory.ini"), `[doppio_hosts]\n${launch.serverName}\n`);
    // Connection settings as extra vars (the highest precedence): nothing in the inventory,
    // group_vars or the host can point the play elsewhere.
    writeFileSync(
      path.join(workDir, "vars.json"),
      JSON.stringify({
        ...launch.vars,
        ansible_ssh_private_key_file: this.key.privateKeyPath,
        doppio_known_hosts_file: knownHosts,
      }),
      { mode: 0o600 },
    );
    const env: NodeJS.ProcessEnv = {};
    for (const k of PASSED_ENV) if (process.env[k] !== undefined) env[k] = process.env[k];
    Object.assign(env, {
      ANSIBLE_CONFIG: path.join(this.ctx.config.ansibleDir, "ansible.cfg"),
      ANSIBLE_STDOUT_CALLBACK: "doppio_jsonl",
      ANSIBLE_SSH_CONTROL_PATH_DIR: path.join(workDir, "cp"),
      ANSIBLE_FORCE_COLOR: "0",
      ANSIBLE_NOCOLOR: "1",
      PYTHONUNBUFFERED: "1",
    });
    const child = spawn(
      "ansible-playbook",
      [
        "-i",
        path.join(workDir, "inventory.ini"),
        path.join(this.ctx.config.ansibleDir, launch.playbook),
        "-e",
        `@${path.join(workDir, "vars.json")}`,
      ],
      { cwd: this.ctx.config.ansibleDir, env, detached: true, stdio: ["ignore", "pipe", "pipe"] },
    );
    let settle = () => {};
    const r: Running = {
      launch,
      child,
      workDir,
      cancelled: false,
      interrupted: false,
      done: new Promise<void>((resolve) => {
        settle = resolve;
      }),
      queue: Promise.resolve(),
      lastPosition: 0,
      firstFailure: null,
      stats: null,
      stderr: "",
    };
    this.running.set(launch.playId, r);
    const step = (what: string, fn: () => Promise<void>) => {
      r.queue = r.queue
        .then(fn)
        .catch((err) => this.ctx.log.error({ err, play: launch.playId }, `play: ${what} failed`));
    };
    let ended = false;
    const end = (code: number | null, signal: NodeJS.Signals | null) => {
      if (ended) return;
      ended = true;
      // Its processes end and its secrets go before the play is shown ended.
      step("cleanup", () => this.cleanup(r));
      step("finish", () => this.finish(r, code, signal));
      step("release", async () => {
        this.running.delete(launch.playId);
        settle();
      });
    };
    child.on("error", (err) => {
      // Could not start (ansible-playbook missing, say): no close event may follow.
      r.stderr += `\n${err.message}`;
      if (child.pid === undefined) end(null, null);
    });
    step("start", () => this.started(r));
    createInterface({ input: child.stdout! }).on("line", (line) => {
      const event = parseEvent(line);
      if (event) step(event.event, () => this.apply(r, event));
      else if (line.trim())
        this.ctx.log.warn(
          { play: launch.playId, line: this.scrub(r, line).slice(0, 500) },
          "play: not an event",
        );
    });
    child.stderr!.on("data", (d: Buffer) => {
      r.stderr = (r.stderr + d.toString()).slice(-STDERR_KEEP);
    });
    child.on("close", end);
  }

  /** Stops a running play's process group; false when this runner does not hold it. */
  cancel(playId: string): boolean {
    const r = this.running.get(playId);
    if (!r?.child.pid) return false;
    r.cancelled = true;
    killGroup(r.child.pid, "SIGTERM");
    const pid = r.child.pid;
    setTimeout(() => {
      if (this.running.has(playId)) killGroup(pid, "SIGKILL");
    }, KILL_AFTER_MS).unref();
    return true;
  }

  /** The control plane stops: every running play ends `failure: interrupted`, its child killed. */
  async shutdown(): Promise<void> {
    const all = [...this.running.values()];
    for (const r of all) {
      r.interrupted = true;
      if (r.child.pid) killGroup(r.child.pid, "SIGKILL");
    }
    await Promise.all(all.map((r) => r.done));
  }

  private scrub(r: Running, text: string): string {
    let out = text;
    for (const s of r.launch.secrets) if (s.length >= 8) out = out.replaceAll(s, "[redacted]");
    return out;
  }

  private async publishPlay(playId: string): Promise<void> {
    const [row] = await this.ctx.db.select().from(ansiblePlays).where(eq(ansiblePlays.id, playId));
    const r = this.running.get(playId);
    if (!row) return;
    const [play] = await toPlays(this.ctx.db, r?.launch.serverName ?? "", [row]);
    this.ctx.bus.publishPlay(playId, { type: "play", play: play! });
  }

  private async publishTask(playId: string, taskId: string): Promise<void> {
    const [row] = await this.ctx.db
      .select()
      .from(ansibleTasks)
      .where(and(eq(ansibleTasks.playId, playId), eq(ansibleTasks.taskId, taskId)));
    if (row) this.ctx.bus.publishPlay(playId, { type: "task", task: toTask(row) });
  }

  private async started(r: Running): Promise<void> {
    const id = r.launch.playId;
    await this.ctx.db
      .update(ansiblePlays)
      .set({ status: "running", startedAt: this.ctx.clock.now(), pid: r.child.pid ?? null })
      .where(and(eq(ansiblePlays.id, id), eq(ansiblePlays.status, "pending")));
    await this.publishPlay(id);
  }

  private async apply(r: Running, e: CallbackEvent): Promise<void> {
    const playId = r.launch.playId;
    const db = this.ctx.db;
    switch (e.event) {
      case "plan": {
        const [max] = await db
          .select({ p: sql<number>`coalesce(max(${ansibleTasks.position}), 0)::int` })
          .from(ansibleTasks)
          .where(eq(ansibleTasks.playId, playId));
        // Room after each planned task for the ones Ansible only knows at run time
        // (facts, includes, handlers): they go right after the task that ran before them.
        const base = Math.ceil(Number(max?.p ?? 0) / 1000) * 1000;
        if (e.tasks.length > 0)
          await db
            .insert(ansibleTasks)
            .values(
              e.tasks.map((t, i) => ({
                playId,
                taskId: t.id,
                position: base + (i + 1) * 1000,
                name: this.scrub(r, t.name),
                role: t.role,
              })),
            )
            .onConflictDoNothing();
        const rows = await db.select().from(ansibleTasks).where(eq(ansibleTasks.playId, playId));
        for (const t of rows) this.ctx.bus.publishPlay(playId, { type: "task", task: toTask(t) });
        await this.publishPlay(playId);
        return;
      }
      case "task_start": {
        // Ansible's moment, not this one: events wait in line while earlier ones are stored.
        const at = new Date(e.at);
        const [known] = await db
          .update(ansibleTasks)
          .set({ status: "running", startedAt: at, endedAt: null })
          .where(and(eq(ansibleTasks.playId, playId), eq(ansibleTasks.taskId, e.id)))
          .returning({ position: ansibleTasks.position });
        if (known) r.lastPosition = known.position;
        else {
          r.lastPosition += 1;
          await db.insert(ansibleTasks).values({
            playId,
            taskId: e.id,
            position: r.lastPosition,
            name: this.scrub(r, e.name),
            role: e.role,
            handler: e.handler,
            status: "running",
            startedAt: at,
          });
        }
        await this.publishTask(playId, e.id);
        return;
      }
      case "task_result": {
        const output = this.scrub(r, e.output).trim() || null;
        const error = e.error ? this.scrub(r, e.error).trim() : null;
        const [task] = await db
          .update(ansibleTasks)
          .set({ status: e.status, endedAt: new Date(e.at), output, error })
          .where(and(eq(ansibleTasks.playId, playId), eq(ansibleTasks.taskId, e.id)))
          .returning({ name: ansibleTasks.name });
        if ((e.status === "failed" || e.status === "unreachable") && !r.firstFailure)
          r.firstFailure = `${task?.name ?? "a task"}: ${error ?? e.status}`;
        await this.publishTask(playId, e.id);
        await this.publishPlay(playId);
        return;
      }
      case "stats": {
        const sum: PlayCounters = {
          ok: 0,
          changed: 0,
          failed: 0,
          skipped: 0,
          unreachable: 0,
          rescued: 0,
          ignored: 0,
        };
        for (const h of Object.values(e.hosts)) {
          sum.ok += h.ok;
          sum.changed += h.changed;
          sum.failed += h.failures;
          sum.skipped += h.skipped;
          sum.unreachable += h.unreachable;
          sum.rescued += h.rescued;
          sum.ignored += h.ignored;
        }
        r.stats = sum;
        await db.update(ansiblePlays).set({ counters: sum }).where(eq(ansiblePlays.id, playId));
        return;
      }
    }
  }

  private async finish(r: Running, code: number | null, signal: NodeJS.Signals | null): Promise<void> {
    const { playId, kind, serverId } = r.launch;
    const db = this.ctx.db;
    const now = this.ctx.clock.now();
    const status = r.cancelled ? "cancelled" : code === 0 && !r.interrupted ? "success" : "failure";
    const stderr = this.scrub(r, r.stderr.trim().split("\n").slice(-5).join("\n"));
    const error =
      status === "success"
        ? null
        : status === "cancelled"
          ? "cancelled by an administrator"
          : r.interrupted
            ? "interrupted: the control plane stopped during the play"
            : (r.firstFailure ??
              `ansible-playbook ended with ${signal ?? `exit code ${code}`}${stderr ? `: ${stderr}` : ""}`);
    // Before the play's last event: a follower stops listening when the play has ended.
    const settled = await settleTasks(
      this.ctx,
      playId,
      status === "success" ? "ok" : "cancelled",
      status === "success",
    );
    for (const t of settled) this.ctx.bus.publishPlay(playId, { type: "task", task: toTask(t) });
    const updated = await db
      .update(ansiblePlays)
      .set({ status, endedAt: now, error, pid: null, ...(r.stats ? { counters: r.stats } : {}) })
      .where(and(eq(ansiblePlays.id, playId), inArray(ansiblePlays.status, ["pending", "running"])))
      .returning({ id: ansiblePlays.id });
    if (updated.length > 0) {
      if (status === "success")
        // A server an operator drained or disabled stays so: a deploy is not a decision to
        // take boxes or hand out jobs again.
        await db
          .update(servers)
          .set({ status: "active", statusMessage: null })
          .where(and(eq(servers.id, serverId), inArray(servers.status, PLAY_MAKES_ACTIVE)));
      else if (status === "failure" || kind === "prepare")
        await db
          .update(servers)
          .set({
            status: "error",
            statusMessage: `${kind === "prepare" ? "Prepare server" : "Deploy agent"}: ${error}`,
          })
          .where(eq(servers.id, serverId));
    }
    await this.recordHostKeys(r);
    await this.publishPlay(playId);
  }

  /** Trust on first use: the key the first play met is recorded; later plays pin it. */
  private async recordHostKeys(r: Running): Promise<void> {
    if (r.launch.hostKeys) return;
    const file = path.join(r.workDir, "known_hosts");
    const lines = existsSync(file) ? readFileSync(file, "utf8").trim() : "";
    if (!lines) return;
    await this.ctx.db
      .update(serverSsh)
      .set({ hostKeys: `${lines}\n`, updatedAt: this.ctx.clock.now() })
      .where(and(eq(serverSsh.serverId, r.launch.serverId), isNull(serverSsh.hostKeys)));
  }

  private async cleanup(r: Running): Promise<void> {
    // The secrets file goes first; ssh connection masters (ControlPersist) left the process
    // group when they daemonized, so each is asked to exit. A master answers that before it
    // has exited: its process is watched until it is gone.
    rmSync(path.join(r.workDir, "vars.json"), { force: true });
    const cp = path.join(r.workDir, "cp");
    await Promise.all((existsSync(cp) ? readdirSync(cp) : []).map((name) => endMaster(path.join(cp, name))));
  }
}

/** Asks the ssh connection master on `sock` to exit and waits (a few seconds at most) until it has. */
async function endMaster(sock: string): Promise<void> {
  const ssh = (op: string) => run("ssh", ["-O", op, "-o", `ControlPath=${sock}`, "x"], { timeout: 5000 });
  // "Master running (pid=N)" on stderr; a socket with no master behind it fails (already gone).
  const pid = await ssh("check").then(
    ({ stderr }) => Number(/pid=(\d+)/.exec(stderr)?.[1] ?? 0),
    () => 0,
  );
  if (!pid) return;
  await ssh("exit").catch(() => undefined);
  // An exited master that no one has reaped yet has an empty command line.
  const alive = () => {
    try {
      return readFileSync(`/proc/${pid}/cmdline`).length > 0;
    } catch {
      return false;
    }
  };
  for (const deadline = Date.now() + MASTER_EXIT_MS; alive() && Date.now() < deadline; ) await sleep(20);
}
