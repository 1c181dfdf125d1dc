import { Command } from "commander";
import pkg from "../package.json" with { type: "json" };
import { App, type GlobalOptions } from "./app.ts";
import { registerAdminServerCommands } from "./commands/admin-servers.ts";
import { registerAuthCommands } from "./commands/auth.ts";
import { registerBillingCommands } from "./commands/billing.ts";
import { registerInfoCommands } from "./commands/box-info.ts";
import { registerBoxCommands } from "./commands/boxes.ts";
import { registerCompletionCommand } from "./commands/completion.ts";
import { registerContextCommands } from "./commands/context.ts";
import { registerGitHubCommands } from "./commands/github.ts";
import { registerIdleCommands } from "./commands/idle.ts";
import { registerLogsCommand } from "./commands/logs.ts";
import { registerVerificationCommands } from "./commands/verification.ts";
import type { Io } from "./io.ts";

const VERSION: string = pkg.version;

export function buildProgram(io: Io): Command {
  const program = new Command("doppio");
  const app = new App(io, () => program.opts<GlobalOptions>());
  program
    .description("doppiobox from the terminal: create, start, stop and open your dev boxes")
    .version(VERSION, "-V, --version")
    .option("--context <name>", "use this context instead of the current one")
    .option("--debug", "show stack traces and causes of errors")
    .exitOverride()
    .showSuggestionAfterError(false)
    .configureOutput({
      writeOut: (s) => io.stdout.write(s),
      writeErr: (s) => io.stderr.write(s),
      // Usage errors are printed by main in the CLI's one-line format.
      outputError: () => {},
    })
    .configureHelp({ sortSubcommands: false, showGlobalOptions: true })
    .addHelpText(
      "after",
      `
Examples:
  doppio login --url https://boxes.example.com
  doppio create my-box --template minimal --env DEBUG=1
  doppio ls
  doppio open my-box --code
  doppio logs my-box -f
  doppio rm my-box --yes

Environment:
  DOPPIO_URL, DOPPIO_TOKEN   override the current context (for CI)
  DOPPIO_CONTEXT             pick a context by name
  XDG_CONFIG_HOME            config lives in $XDG_CONFIG_HOME/doppio/config.json

Exit codes: 0 success, 1 operation failed (job failed, not found, denied),
2 usage error, 3 cannot reach the control plane, 130 interrupted (Ctrl-C).`,
    );

  registerAuthCommands(program, app);
  registerContextCommands(program, app);
  registerBoxCommands(program, app);
  registerIdleCommands(program, app);
  registerInfoCommands(program, app);
  registerLogsCommand(program, app);
  registerBillingCommands(program, app);
  registerGitHubCommands(program, app);
  registerCompletionCommand(program, app);
  registerAdminServerCommands(program, app);
  registerVerificationCommands(program, app);
  return program;
}
