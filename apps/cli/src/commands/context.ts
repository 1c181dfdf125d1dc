import type { Command } from "commander";
import { ApiClient } from "../api.ts";
import type { App } from "../app.ts";
import { checkContextName, normalizeUrl } from "../config.ts";
import { failed, usageError } from "../errors.ts";
import { examples, printJson, renderTable } from "../output.ts";
import { revoke } from "./auth.ts";

export function registerContextCommands(program: Command, app: App): void {
  const context = program
    .command("context")
    .description("manage control planes (contexts) in the config file")
    .addHelpText(
      "after",
      `
Contexts live in $XDG_CONFIG_HOME/doppio/config.json (default ~/.config/doppio/), mode 0600.
DOPPIO_URL and DOPPIO_TOKEN override the current context; --context NAME (or
DOPPIO_CONTEXT) picks another one for a single command.

Examples:
  doppio context add staging --url https://boxes.staging.example.com
  doppio context use staging && doppio login
  doppio --context prod ls`,
    );

  context
    .command("ls")
    .description("list contexts")
    .option("--json", "print JSON (never includes tokens)")
    .addHelpText("after", examples("doppio context ls"))
    .action(async (opts: { json?: boolean }) => {
      const config = await app.config();
      const rows = Object.entries(config.contexts).map(([name, c]) => ({
        name,
        url: c.url,
        email: c.email ?? null,
        signedIn: Boolean(c.token),
        current: name === config.current,
      }));
      if (opts.json) return printJson(app.io.stdout, rows);
      if (rows.length === 0) {
        app.io.stdout.write("No contexts yet. Add one with: doppio login --url URL\n");
        return;
      }
      app.io.stdout.write(
        renderTable(
          ["CURRENT", "NAME", "URL", "USER"],
          rows.map((r) => [r.current ? "*" : "", r.name, r.url, r.signedIn ? (r.email ?? "(token)") : "-"]),
        ),
      );
    });

  context
    .command("add <name>")
    .description("add a context (sign in to it with: doppio login)")
    .requiredOption("--url <url>", "control plane URL")
    .option("--use", "make it the current context")
    .addHelpText(
      "after",
      examples("doppio context add staging --url https://boxes.staging.example.com --use"),
    )
    .action(async (rawName: string, opts: { url: string; use?: boolean }) => {
      const name = checkContextName(rawName);
      const config = await app.config();
      if (config.contexts[name])
        throw usageError(`context "${name}" exists`, `remove it first: doppio context rm ${name}`);
      config.contexts[name] = { url: normalizeUrl(opts.url) };
      if (opts.use || !config.current) config.current = name;
      await app.saveConfig(config);
      app.io.stdout.write(`Added context "${name}"${config.current === name ? " (current)" : ""}.\n`);
    });

  context
    .command("use <name>")
    .description("switch the current context")
    .addHelpText("after", examples("doppio context use staging"))
    .action(async (name: string) => {
      const config = await app.config();
      if (!config.contexts[name])
        throw failed(`no context named "${name}"`, "list them with: doppio context ls");
      config.current = name;
      await app.saveConfig(config);
      app.io.stdout.write(`Using context "${name}" (${config.contexts[name].url}).\n`);
    });

  context
    .command("rm <name>")
    .description("forget a context, revoking its token on the server")
    .addHelpText("after", examples("doppio context rm staging"))
    .action(async (name: string) => {
      const config = await app.config();
      const ctx = config.contexts[name];
      if (!ctx) throw failed(`no context named "${name}"`, "list them with: doppio context ls");
      if (ctx.token) {
        await revoke(new ApiClient(ctx.url, ctx.token), ctx.token, ctx.tokenId).catch((err: unknown) => {
          const reason = err instanceof Error ? err.message : String(err);
          app.io.stderr.write(`doppio: warning: could not revoke the token on the server (${reason})\n`);
        });
      }
      delete config.contexts[name];
      if (config.current === name) config.current = null;
      await app.saveConfig(config);
      app.io.stdout.write(`Removed context "${name}".\n`);
    });
}
