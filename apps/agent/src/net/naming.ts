import { ipToNum } from "./ipv4.ts";

/** Every TAP this agent creates starts with this; reconcile lists TAPs by it. */
export const TAP_PREFIX = "dbx";

/**
 * TAP name for a box IP: `dbx` + 8 hex digits of the IPv4 (11 characters, under the
 * kernel's 15). Unique per IP and never derived from the slug, which may be 40 characters.
 */
export function tapNameForIp(ip: string): string {
  return `${TAP_PREFIX}${ipToNum(ip).toString(16).padStart(8, "0")}`;
}

/** Deterministic, locally administered unicast MAC for a box IP: 06:00:<the 4 IP octets>. */
export function macForIp(ip: string): string {
  const n = ipToNum(ip);
  const octets = [0x06, 0x00, n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255];
  return octets.map((o) => o.toString(16).padStart(2, "0")).join(":");
}

/** Linux interface names: 1-15 characters, no slash, whitespace or colon. */
export function isValidIfName(name: string): boolean {
  return /^[A-Za-z0-9_.-]{1,15}$/.test(name);
}
