/** "12.50" → 1250 minor units, parsed as text so no float ever holds money; null if not an amount. */
export function parseAmount(text: string): number | null {
  const m = /^(\d{1,7})(?:[.,](\d{1,2}))?$/.exec(text.trim());
  if (!m) return null;
  return Number(m[1]) * 100 + Number((m[2] ?? "0").padEnd(2, "0"));
}
