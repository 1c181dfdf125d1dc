import type { OutStream } from "./io.ts";

export function printJson(out: OutStream, value: unknown): void {
  out.write(`${JSON.stringify(value, null, 2)}\n`);
}

/** Left-aligned columns separated by two spaces; the last column is never padded. */
export function renderTable(headers: string[], rows: string[][]): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]!)))
      .join("  ")
      .trimEnd();
  return `${[line(headers), ...rows.map(line)].join("\n")}\n`;
}

export function printKeyValues(out: OutStream, pairs: [string, string][]): void {
  const width = Math.max(...pairs.map(([k]) => k.length)) + 1;
  for (const [k, v] of pairs) out.write(`${`${k}:`.padEnd(width)} ${v}\n`);
}

/** `42s`, `3m05s`, `2h04m` */
export function formatDuration(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(m / 60)}h${String(m % 60).padStart(2, "0")}m`;
}

/** `5m ago`, from an ISO timestamp. */
export function formatAge(iso: string, now: number): string {
  const ms = now - Date.parse(iso);
  if (!Number.isFinite(ms)) return iso;
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 60) return `${s}s ago`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ago`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h}h ago`;
  return `${Math.floor(h / 24)}d ago`;
}

/** Time until `iso`: `in 12m`, `in 45s`, `now` once it has passed. */
export function formatIn(iso: string, now: number): string {
  const ms = Date.parse(iso) - now;
  if (!Number.isFinite(ms)) return iso;
  const s = Math.floor(ms / 1000);
  if (s <= 0) return "now";
  if (s < 60) return `in ${s}s`;
  const m = Math.floor(s / 60);
  if (m < 120) return `in ${m}m`;
  return `in ${Math.floor(m / 60)}h`;
}

/** `08:51:55` in UTC: log lines compare across machines. */
export function clockTime(ms: number): string {
  return new Date(ms).toISOString().slice(11, 19);
}

/** The "Examples:" block every command's --help ends with. */
export const examples = (...lines: string[]) => `\nExamples:\n${lines.map((l) => `  ${l}`).join("\n")}`;

export const shortId = (id: string) => id.slice(0, 8);
