import type { AnsiblePlay, AnsibleTask, PlayKind } from "@doppio/contracts";
import type { Command } from "commander";
import type { App } from "../app.ts";
import { CliError } from "../errors.ts";

/** `doppio admin servers …`: run and watch the Ansible plays the control plane runs on hosts. */
export function registerAdminServerCommands(program: Command, app: App): void {
  const servers = program
    .command("admin")
    .description("administrators: hosts and the plays that prepare them, accounts' email verification")
    .command("servers")
    .description("prepare hosts and deploy their agent (Ansible, run by the control plane)");

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
