import { type Command, CommanderError } from "commander";
import { CliError, EXIT_CODES } from "./errors.ts";
import { type Io, processIo } from "./io.ts";
import { buildProgram } from "./program.ts";
import { loadSettings } from "./settings.ts";

/** Runs the CLI and returns its exit code; never throws. */
async function run(argv: readonly string[], io: Io): Promise<number> {
  const debug = argv.includes("--debug");
  const program = buildProgram(io);
  try {
    await program.parseAsync([...argv], { from: "user" });
    return 0;
  } catch (err) {
    return report(io, err, debug, commandPath(program, argv));
  }
}

function report(io: Io, err: unknown, debug: boolean, path: string): number {
  const line = (message: string, hint?: string) => {
    io.stderr.write(`doppio: ${message}\n`);
    if (hint) io.stderr.write(`hint: ${hint}\n`);
  };
  let code: number;
  if (err instanceof CommanderError) {
    // --help and --version end with a CommanderError too, and exit code 0; a command
    // group run without a subcommand has already printed its help to stderr.
    if (err.exitCode === 0) return 0;
    if (err.code === "commander.help") return EXIT_CODES.usage;
    line(err.message.replace(/^error: /, ""), `see: doppio ${path}--help`);
    code = EXIT_CODES.usage;
  } else if (err instanceof CliError) {
    line(err.message, err.hint);
    code = err.exitCode;
  } else if (isPromptAbort(err, "SIGINT")) {
    line("interrupted; nothing was changed");
    code = EXIT_CODES.interrupted;
  } else if (isPromptAbort(err, "EOF")) {
    line("no answer (input closed); nothing was changed", "pass --yes to confirm from a script");
    code = EXIT_CODES.failed;
  } else {
    line(
      `unexpected error: ${err instanceof Error ? err.message : String(err)}`,
      "run again with --debug for details",
    );
    code = EXIT_CODES.failed;
  }
  if (debug) {
    for (let e: unknown = err; e; e = (e as { cause?: unknown }).cause) {
      io.stderr.write(`${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    }
  }
  return code;
}

function isPromptAbort(err: unknown, code: string): boolean {
  return err instanceof Error && (err as { code?: unknown }).code === code;
}

/** "context add " for `doppio --debug context add x`: the known command words in argv. */
function commandPath(program: Command, argv: readonly string[]): string {
  let path = "";
  let cmd: Command = program;
  for (let i = 0; i < argv.length; i++) {
    const w = argv[i]!;
    if (w === "--context") i++;
    if (w.startsWith("-")) continue;
    const sub = cmd.commands.find((c) => c.name() === w);
    if (!sub) break;
    path += `${w} `;
    cmd = sub;
  }
  return path;
}

/** Entry point of the `doppio` binary. */
export async function main(): Promise<void> {
  // A failure outside any command's promise chain still ends in the CLI's one-line format.
  process.on("unhandledRejection", (err) => {
    process.stderr.write(`doppio: unexpected error: ${err instanceof Error ? err.message : String(err)}\n`);
    if (process.argv.includes("--debug") && err instanceof Error) process.stderr.write(`${err.stack}\n`);
    process.exit(EXIT_CODES.failed);
  });
  let code: number;
  try {
    const io = processIo(loadSettings(process.env));
    code = await run(process.argv.slice(2), io);
  } catch (err) {
    process.stderr.write(`doppio: ${err instanceof Error ? err.message : String(err)}\n`);
    code = EXIT_CODES.usage;
  }
  // Open event streams or timers must not keep a finished command alive.
  process.exit(code);
}
