import {
  type AnsiblePlay,
  type AnsibleTask,
  type PlayKind,
  type Server,
  WARM_POOL_SIZE_MAX,
} from "@doppio/contracts";
import type { Command } from "commander";
import { ApiError } from "../api.ts";
import type { App } from "../app.ts";
import { CliError, usageError } from "../errors.ts";
import { formatAge, printJson, renderTable } from "../output.ts";

/**
 * `doppio admin servers …`: list hosts with their warm pools, size a pool, and run and watch
 * the Ansible plays the control plane runs on hosts.
 */
export function registerAdminServerCommands(program: Command, app: App): void {
  const servers = program
    .command("admin")
    .description("administrators: hosts and the plays that prepare them, accounts' email verification")
    .command("servers")
    .description("list hosts and their warm pools, size a pool, prepare hosts and deploy their agent");

  servers
    .command("list", { isDefault: true })
    .description("list hosts with their warm pool per template (the default)")
    .option("--json", "print the servers as JSON")
    .action(async (opts: { json?: boolean }) => {
      const api = await app.api();
      const { servers: list } = await api.run((sdk) => sdk.request("listServers", {}));
      if (opts.json) return printJson(app.io.stdout, list);
      app.io.stdout.write(serverTable(list, Date.now()));
    });

  servers
    .command("warm-pool <name> <template> <size>")
    .description(
      `keep <size> parked clones of <template> ready on host <name> (0 to ${WARM_POOL_SIZE_MAX}; 0 empties the pool)`,
    )
    .action(async (name: string, template: string, raw: string) => {
      const size = poolSize(raw);
      const api = await app.api();
      const server = await api
        .run((sdk) => sdk.request("setWarmPool", { params: { name }, body: { sizes: { [template]: size } } }))
        .catch((err: unknown) => {
          if (!(err instanceof ApiError) || err.code !== "not_found") throw err;
          throw new ApiError(err.status, err.code, err.message, "list servers with: doppio admin servers");
        });
      const pool = server.warmPool.find((p) => p.template === template);
      app.io.stdout.write(
        `warm pool of ${template} on ${name}: size ${size} (as last reported: ${pool?.ready ?? 0} ready, ${pool?.filling ?? 0} filling)\n`,
      );
    });

  const start = (kind: PlayKind, cmd: string, what: string) =>
    servers
      .command(`${cmd} <name>`)
      .description(what)
      .option("--follow", "print each task as it runs until the play ends (exit 1 unless it succeeds)")
      .option("--allow-tcg", "the host has no KVM: run QEMU by software emulation (trials only)")
      .action(async (name: string, opts: { follow?: boolean; allowTcg?: boolean }) => {
        const api = await app.api();
        const play = await api.run((sdk) =>
          sdk.request("startPlay", {
            params: { name },
            body: { playbook: kind, variables: opts.allowTcg ? { allowTcg: true } : {} },
          }),
        );
        app.io.stdout.write(`play ${play.id}: ${kind} on ${name} (${play.status})\n`);
        if (opts.follow) await follow(app, play.id);
      });
  start("prepare", "prepare", "run playbook.yml: turn the host into a doppiobox server");
  start("deploy_agent", "deploy-agent", "run deploy-agent.yml: upload and restart the host's agent");

  servers
    .command("plays <name>")
    .description("list a host's plays, newest first")
    .option("--json", "print the plays as JSON")
    .action(async (name: string, opts: { json?: boolean }) => {
      const api = await app.api();
      const { plays } = await api.run((sdk) => sdk.request("listPlays", { params: { name } }));
      if (opts.json) {
        app.io.stdout.write(`${JSON.stringify(plays, null, 2)}\n`);
        return;
      }
      for (const p of plays) app.io.stdout.write(`${playLine(p)}\n`);
    });

  servers
    .command("cancel <play-id>")
    .description("stop a running play")
    .action(async (id: string) => {
      const api = await app.api();
      const play = await api.run((sdk) => sdk.request("cancelPlay", { params: { id } }));
      app.io.stdout.write(`${playLine(play)}\n`);
    });
}

/** A pool size as typed: a whole number within the pools' bound, else a usage error. */
function poolSize(raw: string): number {
  const n = /^\d+$/.test(raw) ? Number(raw) : Number.NaN;
  if (!Number.isSafeInteger(n) || n > WARM_POOL_SIZE_MAX) {
    throw usageError(
      `invalid pool size "${raw}": a whole number from 0 to ${WARM_POOL_SIZE_MAX}`,
      "0 empties the pool",
    );
  }
  return n;
}

/**
 * One row per host and template pool: the size set here (or the agent's own, marked), and
 * the clones ready and being made as its agent last reported; a host without pools gets one
 * row with `-`.
 */
function serverTable(list: Server[], now: number): string {
  const rows: string[][] = [];
  for (const s of list) {
    const host = [s.name, s.status, s.lastHeartbeatAt ? formatAge(s.lastHeartbeatAt, now) : "never"];
    if (s.warmPool.length === 0) rows.push([...host, "-", "-", "-", "-"]);
    for (const p of s.warmPool) {
      const size = p.size === null ? `${p.target} (agent config)` : String(p.size);
      rows.push([...host, p.template, size, String(p.ready), String(p.filling)]);
    }
  }
  return renderTable(["SERVER", "STATUS", "HEARTBEAT", "POOL", "SIZE", "READY", "FILLING"], rows);
}

function playLine(p: AnsiblePlay): string {
  const c = p.counters;
  const took = p.durationMs === null ? "" : ` ${(p.durationMs / 1000).toFixed(1)}s`;
  return [
    p.id,
    p.playbook,
    p.status,
    `${p.progress.done}/${p.progress.total}`,
    `ok=${c.ok} changed=${c.changed} failed=${c.failed} skipped=${c.skipped} unreachable=${c.unreachable}`,
    `${p.createdAt}${took}`,
    p.error ?? "",
  ]
    .join("  ")
    .trimEnd();
}

function taskLine(t: AnsibleTask): string {
  const took = t.durationMs === null ? "" : ` (${(t.durationMs / 1000).toFixed(1)}s)`;
  const error = t.error ? `\n    ${t.error.split("\n").join("\n    ")}` : "";
  return `${t.status.padEnd(11)} ${t.role ? `${t.role} : ` : ""}${t.name}${took}${error}`;
}

/** Prints each task once it has a result, then the play's summary; fails unless it succeeded. */
async function follow(app: App, id: string): Promise<void> {
  const api = await app.api();
  const printed = new Set<string>();
  const seen: { play: AnsiblePlay | null } = { play: null };
  const abort = new AbortController();
  await app.io.onInterrupt(
    () => abort.abort(),
    () =>
      api.run(async (sdk) => {
        for await (const e of sdk.stream("streamPlay", { params: { id } }, { signal: abort.signal })) {
          if (e.event === "task") {
            const t = e.data;
            if (t.status !== "pending" && t.status !== "running" && !printed.has(t.id)) {
              printed.add(t.id);
              app.io.stdout.write(`${taskLine(t)}\n`);
            }
          } else seen.play = e.data;
        }
      }),
  );
  const end = seen.play;
  if (!end)
    throw new CliError(
      "interrupted",
      `stopped following play ${id} (it goes on; cancel it with: doppio admin servers cancel ${id})`,
    );
  app.io.stdout.write(`${playLine(end)}\n`);
  if (end.status !== "success")
    throw new CliError("failed", `the play ended ${end.status}${end.error ? `: ${end.error}` : ""}`);
}
