import type { LogLine } from "@doppio/contracts";
import { followLogs as follow, StreamBrokenError } from "@doppio/sdk";
import { type ApiClient, toCliError } from "./api.ts";
import type { Io } from "./io.ts";

export type LogFormat = "tty" | "plain" | "json";

// A whole escape sequence (CSI, OSC up to BEL/ST, or a two-byte escape), else a lone control
// character other than tab. Guest output is untrusted: it may not move the cursor, clear the
// screen or set the title of the user's terminal; colours (SGR) are all it keeps.
const ESCAPES =
  // biome-ignore lint/suspicious/noControlCharactersInRegex: matching control characters is the point
  /\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])|[\x00-\x08\x0a-\x1f\x7f]/g;
// biome-ignore lint/suspicious/noControlCharactersInRegex: an SGR (colour) sequence
const SGR = /^\x1b\[[0-9;:]*m$/;

/** `text` safe for a terminal: colours kept when `colour`, every other escape removed. */
export function sanitizeLogText(text: string, colour: boolean): string {
  return text.replace(ESCAPES, (m) => (colour && SGR.test(m) ? m : ""));
}

const RESET = "\x1b[0m";
const PALETTE = [36, 35, 33, 32, 34, 31];

function sourceColour(source: string): string {
  if (source === "console") return "\x1b[2m";
  let h = 0;
  for (const c of source) h = (h * 31 + c.charCodeAt(0)) >>> 0;
  return `\x1b[${PALETTE[h % PALETTE.length]}m`;
}

/**
 * Formats log lines for stdout: `source | text` with the source coloured and padded on a
 * terminal, `[source] text` without colours for pipes and files, one JSON object per line
 * for `--json`.
 */
export class LogPrinter {
  private width = 0;

  constructor(private readonly format: LogFormat) {}

  render(lines: readonly LogLine[]): string {
    let out = "";
    for (const l of lines) out += `${this.line(l)}\n`;
    return out;
  }

  private line(l: LogLine): string {
    if (this.format === "json") return JSON.stringify(l);
    if (this.format === "plain") return `[${l.source}] ${sanitizeLogText(l.text, false)}`;
    this.width = Math.max(this.width, l.source.length);
    const text = sanitizeLogText(l.text, true);
    const reset = text.includes("\x1b") ? RESET : "";
    return `${sourceColour(l.source)}${l.source.padEnd(this.width)}${RESET} | ${text}${reset}`;
  }
}

/**
 * Follows a box's log stream from after line `after`, handing each batch of new lines to
 * `onLines`. A stream that drops or a control plane that cannot be reached is retried
 * with a growing pause, resuming after the last line seen (the SDK's followLogs), and said
 * so on stderr; an answer such as 404 (box gone) or 401 ends it with that error. Runs until
 * `signal` aborts.
 */
export async function followLogs(
  api: ApiClient,
  io: Io,
  slug: string,
  from: { after: number; source?: string },
  onLines: (lines: LogLine[]) => void,
  signal: AbortSignal,
): Promise<void> {
  let lost = false;
  await api.run(async (sdk) => {
    const lines = follow(sdk, slug, {
      ...from,
      signal,
      onOpen() {
        if (lost) io.stderr.write("doppio: reconnected to the log stream\n");
        lost = false;
      },
      onLost(cause, delayMs, after) {
        // A cut-off stream reads as what broke it ("terminated"); anything else as the CLI reports it.
        const reason =
          cause === null
            ? "the server closed it"
            : describe(cause instanceof StreamBrokenError ? cause.cause : toCliError(api.baseUrl, cause));
        io.stderr.write(
          `doppio: log stream lost (${reason}); reconnecting in ${formatSeconds(delayMs)} after line ${after}\n`,
        );
        lost = true;
      },
    });
    for await (const batch of lines) onLines(batch);
  });
}

const describe = (err: unknown) => (err instanceof Error ? err.message : String(err));

const formatSeconds = (ms: number) => `${Number((ms / 1000).toFixed(1))}s`;
