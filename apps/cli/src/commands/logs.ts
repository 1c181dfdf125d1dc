import { LogSource } from "@doppio/contracts";
import type { Command } from "commander";
import type { App } from "../app.ts";
import { CliError, usageError } from "../errors.ts";
import { followLogs, type LogFormat, LogPrinter } from "../logs.ts";
import { parseSlug } from "./box-args.ts";

/** The server keeps the newest 5000 lines of a box, and pages up to that many. */
const TAIL_MAX = 5000;
const TAIL_DEFAULT = 200;

function parseTail(raw: string): number {
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || n > TAIL_MAX) {
    throw usageError(`invalid --tail "${raw}"`, `pass a number of lines from 0 to ${TAIL_MAX}`);
  }
  return n;
}

function parseSource(raw: string): string {
  if (!LogSource.safeParse(raw).success) {
    throw usageError(`invalid --source "${raw}"`, "sources are console or a service name, e.g. bench");
  }
  return raw;
}

interface LogsOptions {
  follow?: boolean;
  tail: number;
  source?: string;
  json?: boolean;
}

export function registerLogsCommand(program: Command, app: App): void {
  program
    .command("logs <name>")
    .description("print a box's log (its console and services such as bench); -f follows it live")
    .option("-f, --follow", "keep printing new lines as the box writes them (Ctrl-C to stop)")
    .option(
      "-n, --tail <lines>",
      `how many of the newest lines to print first (0-${TAIL_MAX})`,
      parseTail,
      TAIL_DEFAULT,
    )
    .option("--source <name>", "only lines from this source: console, or a service such as bench")
    .option("--json", "print one JSON object per line (NDJSON: seq, at, source, text)")
    .addHelpText(
      "after",
      `
Each line shows its source: console (the box's serial console) or the service that wrote
it. Colours are kept on a terminal; piped output is plain "[source] text". With -f a
dropped connection is retried, resuming after the last line printed.

Examples:
  doppio logs my-box
  doppio logs my-box -f --source bench
  doppio logs my-box -n 1000 --json | jq -r 'select(.source == "bench") | .text'`,
    )
    .action(async (name: string, opts: LogsOptions) => {
      const slug = parseSlug(name);
      const source = opts.source === undefined ? undefined : parseSource(opts.source);
      const api = await app.api();
      const format: LogFormat = opts.json ? "json" : app.io.stdout.isTTY ? "tty" : "plain";
      const printer = new LogPrinter(format);
      const page = await api.logs(slug, { tail: opts.tail, ...(source ? { source } : {}) });
      app.io.stdout.write(printer.render(page.lines));
      if (!opts.follow) return;

      const abort = new AbortController();
      let interrupted = false;
      await app.io.onInterrupt(
        () => {
          interrupted = true;
          abort.abort();
        },
        () =>
          followLogs(
            api,
            app.io,
            slug,
            { after: page.next, ...(source ? { source } : {}) },
            (lines) => app.io.stdout.write(printer.render(lines)),
            abort.signal,
          ),
      );
      if (interrupted) throw new CliError("interrupted", `stopped following the log of ${slug}`);
    });
}
