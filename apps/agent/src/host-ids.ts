import { ipToNum } from "./cidr.ts";

/*
 * Thin stand-ins for the net helper's tapNameForIp/macForIp (apps/agent/src/net/), used
 * until that module lands; both must derive the same names or reconcile removes live TAPs.
 * TAP: "dp" + 8 hex digits of the address (10 chars, under the 15-char kernel limit).
 * MAC: locally administered unicast 02:dc + the 4 address bytes, unique per address.
 */
export function tapNameForIp(ip: string): string {
  return `dp${ipToNum(ip).toString(16).padStart(8, "0")}`;
}

export function macForIp(ip: string): string {
  const hex = ipToNum(ip).toString(16).padStart(8, "0");
  return `02:dc:${hex.match(/../g)!.join(":")}`;
}
