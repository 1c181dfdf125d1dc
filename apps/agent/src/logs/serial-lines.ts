import { LOG_LINE_MAX } from "@doppio/contracts";

export interface SerialLine {
  /** Byte offset in the serial log where the line starts. */
  offset: number;
  source: string;
  text: string;
}

/** `[svc NAME] text`: a guest service's line, copied to the console by the guest's console-logs. */
const SERVICE_LINE = /^\[svc ([a-z0-9][a-z0-9._-]{0,31})\] ?(.*)$/s;
/** C0 controls other than TAB and ESC (colours stay), and DEL: they would garble a terminal. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: stripping control characters is the point
const CONTROL = /[\x00-\x08\x0a-\x1a\x1c-\x1f\x7f]/g;

/**
 * Splits bytes read from `start` of a serial log into complete lines. A partial last line
 * stays unread (`end` stops before it) unless the chunk holds no newline at all and is
 * `full` (a line longer than a read): then the chunk becomes one cut line.
 */
export function splitSerialLines(
  chunk: Buffer,
  start: number,
  full: boolean,
): { lines: SerialLine[]; end: number } {
  const lines: SerialLine[] = [];
  let from = 0;
  for (let nl = chunk.indexOf(10, from); nl >= 0; nl = chunk.indexOf(10, from)) {
    const line = toLine(chunk.subarray(from, nl), start + from);
    if (line) lines.push(line);
    from = nl + 1;
  }
  if (from === 0 && full && chunk.length > 0) {
    const line = toLine(chunk, start);
    if (line) lines.push(line);
    from = chunk.length;
  }
  return { lines, end: start + from };
}

function toLine(bytes: Buffer, offset: number): SerialLine | null {
  const raw = bytes.toString("utf8").replace(CONTROL, "");
  if (raw.trim() === "") return null;
  const svc = SERVICE_LINE.exec(raw);
  const source = svc ? svc[1]! : "console";
  const text = (svc ? svc[2]! : raw).slice(0, LOG_LINE_MAX);
  return { offset, source, text };
}
