import { useEffect, useState } from "react";

/** Current time, re-rendering every `ms` while `active`. */
export function useNow(active = true, ms = 1000): number {
  const [now, setNow] = useState(() => Date.now());
  useEffect(() => {
    if (!active) return;
    setNow(Date.now());
    const t = setInterval(() => setNow(Date.now()), ms);
    return () => clearInterval(t);
  }, [active, ms]);
  return now;
}

/** "0.4 s", "12 s", "3 min 05 s". */
export function formatDuration(ms: number): string {
  const safe = Math.max(0, ms);
  if (safe < 10_000) return `${(safe / 1000).toFixed(1)} s`;
  const s = Math.round(safe / 1000);
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${String(s % 60).padStart(2, "0")} s`;
  return `${Math.floor(m / 60)} h ${String(m % 60).padStart(2, "0")} min`;
}

/** "just now", "42 s ago", "5 min ago". */
export function formatAge(iso: string | null, now: number): string {
  if (!iso) return "never";
  const s = Math.round((now - Date.parse(iso)) / 1000);
  if (s < 5) return "just now";
  if (s < 60) return `${s} s ago`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ago`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h} h ago`;
  return `${Math.floor(h / 24)} days ago`;
}

/** "never expires", "expires in 5 h", "expires in 30 days", "expired 2 h ago". */
export function formatExpiry(iso: string | null, now: number): string {
  if (!iso) return "never expires";
  const ms = Date.parse(iso) - now;
  if (ms <= 0) return `expired ${formatAge(iso, now)}`;
  const h = Math.round(ms / 3_600_000);
  return h < 48 ? `expires in ${Math.max(1, h)} h` : `expires in ${Math.round(h / 24)} days`;
}

export function formatClock(iso: string): string {
  return new Date(iso).toLocaleTimeString([], { hour12: false });
}

/** Minutes (rounded up) until `iso`; 0 once it has passed. */
export function minutesUntil(iso: string, now: number): number {
  return Math.max(0, Math.ceil((Date.parse(iso) - now) / 60_000));
}
