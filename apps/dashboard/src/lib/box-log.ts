import type { LogLine } from "@doppio/contracts";

/** Lines the page keeps per box; older ones drop off the top. */
export const LOG_BUFFER_LINES = 5000;
/** Lines asked for when the stream opens, before the live ones. */
export const LOG_BACKLOG_LINES = 1000;
/** Longest source name padded for; a longer one just pushes its line right. */
const SOURCE_WIDTH_MAX = 12;

export interface LogBuffer {
  lines: readonly LogLine[];
  /** Every source seen since the page opened: `console` first, then services by name. */
  sources: readonly string[];
}

export const EMPTY_LOG: LogBuffer = { lines: [], sources: [] };

/** `fresh` appended after the lines already held (by seq, so a replay adds nothing), bounded. */
export function appendLines(buf: LogBuffer, fresh: readonly LogLine[], max = LOG_BUFFER_LINES): LogBuffer {
  const last = buf.lines.at(-1)?.seq ?? 0;
  const add = fresh.filter((l) => l.seq > last);
  if (add.length === 0) return buf;
  const all = [...buf.lines, ...add];
  const lines = all.length > max ? all.slice(all.length - max) : all;
  const known = new Set(buf.sources);
  const newSources = add.map((l) => l.source).filter((s) => !known.has(s) && known.add(s));
  const sources =
    newSources.length === 0
      ? buf.sources
      : [...buf.sources, ...newSources].sort((a, b) =>
          a === "console" ? -1 : b === "console" ? 1 : a.localeCompare(b),
        );
  return { lines, sources };
}

export function sourceWidth(sources: readonly string[]): number {
  return Math.min(SOURCE_WIDTH_MAX, Math.max(0, ...sources.map((s) => s.length)));
}

// A whole escape sequence (CSI, OSC up to BEL/ST, or a two-byte escape), else a lone control
// character other than tab. Guest output may colour its text, nothing else: no cursor moves,
// screen clears or title changes in the page's terminal.
const ESCAPES =
  // biome-ignore lint/suspicious/noControlCharactersInRegex: matching control characters is the point
  /\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])|[\x00-\x08\x0a-\x1f\x7f]/g;
// biome-ignore lint/suspicious/noControlCharactersInRegex: an SGR (colour) sequence
const SGR = /^\x1b\[[0-9;:]*m$/;

/** `text` with its colours (SGR) kept and every other escape or control character removed. */
export function keepColoursOnly(text: string): string {
  return text.replace(ESCAPES, (m) => (SGR.test(m) ? m : ""));
}

const RESET = "\x1b[0m";
const DIM = "\x1b[2m";
/** Colours readable on the terminal's dark background; red stays for errors. */
const PALETTE = ["\x1b[36m", "\x1b[35m", "\x1b[33m", "\x1b[32m", "\x1b[94m", "\x1b[96m"];

export function sourceColour(source: string): string {
  if (source === "console") return DIM;
  let h = 0;
  for (const c of source) h = (h * 31 + c.charCodeAt(0)) >>> 0;
  return PALETTE[h % PALETTE.length]!;
}

/** One terminal line: the source, coloured and padded to `width`, a dim bar, then the text. */
export function formatLogLine(line: LogLine, width: number): string {
  const text = keepColoursOnly(line.text);
  return `${sourceColour(line.source)}${line.source.padEnd(width)}${RESET} ${DIM}│${RESET} ${text}${text.includes("\x1b") ? RESET : ""}`;
}
