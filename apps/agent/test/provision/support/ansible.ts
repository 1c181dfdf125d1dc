import { spawn } from "node:child_process";
import path from "node:path";
import { ANSIBLE_DIR } from "./test-host.ts";

interface HostStats {
  ok: number;
  changed: number;
  failures: number;
  unreachable: number;
  skipped: number;
  rescued: number;
  ignored: number;
}

export interface PlayRun {
  code: number;
  ms: number;
  /** Every JSON-lines event the ansible.posix.jsonl callback printed. */
  events: Record<string, any>[];
  /** Lines of stdout that were not JSON (must stay empty: a control plane parses stdout). */
  stray: string[];
  stats: Record<string, HostStats>;
  stdout: string;
  stderr: string;
  /** Names of the tasks that reported changed, per host. */
  changedTasks: string[];
  /** Messages of failed tasks. */
  failures: string[];
}

/**
 * Runs a playbook the way the control plane will: non-interactive, every input a variable,
 * the JSON-lines stdout callback. Parses the events (a facts event can be 16 KB: parse, don't grep).
 */
export function runPlaybook(
  playbook: string,
  opts: {
    inventory: string;
    vars?: Record<string, unknown>;
    args?: string[];
    controlPathDir?: string;
    timeoutMs?: number;
  },
): Promise<PlayRun> {
  const args = [
    "-i",
    opts.inventory,
    path.join(ANSIBLE_DIR, playbook),
    ...(opts.vars ? ["-e", JSON.stringify(opts.vars)] : []),
    ...(opts.args ?? []),
  ];
  const env = {
    ...process.env,
    ANSIBLE_CONFIG: path.join(ANSIBLE_DIR, "ansible.cfg"),
    ANSIBLE_STDOUT_CALLBACK: "ansible.posix.jsonl",
    ANSIBLE_FORCE_COLOR: "0",
    ...(opts.controlPathDir ? { ANSIBLE_SSH_CONTROL_PATH_DIR: opts.controlPathDir } : {}),
  };
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const child = spawn("ansible-playbook", args, { env, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => {
      stdout += d.toString();
    });
    child.stderr.on("data", (d: Buffer) => {
      stderr += d.toString();
    });
    const timer = setTimeout(() => child.kill("SIGTERM"), opts.timeoutMs ?? 600_000);
    child.on("error", reject);
    child.on("close", (code) => {
      clearTimeout(timer);
      const events: Record<string, any>[] = [];
      const stray: string[] = [];
      for (const line of stdout.split("\n")) {
        if (!line.trim()) continue;
        try {
          events.push(JSON.parse(line) as Record<string, any>);
        } catch {
          stray.push(line);
        }
      }
      const statsEvent = events.find((e) => e._event === "v2_playbook_on_stats");
      const changedTasks: string[] = [];
      const failures: string[] = [];
      for (const e of events) {
        for (const [host, result] of Object.entries((e.hosts ?? {}) as Record<string, any>)) {
          const task = `${host}: ${e.task?.name ?? "?"}`;
          if (e._event === "v2_runner_on_ok" && result.changed) changedTasks.push(task);
          if (e._event === "v2_runner_on_failed" || e._event === "v2_runner_on_unreachable") {
            failures.push(`${task}: ${result.msg ?? JSON.stringify(result).slice(0, 500)}`);
          }
        }
      }
      resolve({
        code: code ?? -1,
        ms: Date.now() - started,
        events,
        stray,
        stats: (statsEvent?.stats ?? {}) as Record<string, HostStats>,
        stdout,
        stderr,
        changedTasks,
        failures,
      });
    });
  });
}

/** One line per play for test failure messages. */
export function describeRun(run: PlayRun): string {
  return JSON.stringify(
    {
      code: run.code,
      stats: run.stats,
      failures: run.failures,
      changed: run.changedTasks,
      stderr: run.stderr.slice(-2000),
    },
    null,
    1,
  );
}
