/**
 * The box network's layout, the one place it is computed (the IP pool, the host bridge, both
 * backends' golden address, QEMU user mode's own addresses): network, gateway = first
 * address, the box pool, golden = last usable address, broadcast.
 */
import { ipToNum, numToIp } from "./net/ipv4.ts";

export { numToIp };

export interface PoolLayout {
  cidr: string;
  prefix: number;
  network: number;
  gateway: number;
  golden: number;
  broadcast: number;
  /** Inclusive range handed to boxes. */
  first: number;
  last: number;
}

/**
 * Null when the CIDR can hold the layout. The smallest is a /29: network, gateway, golden
 * and broadcast leave 4 box addresses (a /30 would leave none).
 */
export function cidrProblem(cidr: string): string | null {
  const m = /^(\d{1,3}(?:\.\d{1,3}){3})\/(\d{1,2})$/.exec(cidr);
  if (!m) return "must look like 10.0.0.0/16";
  try {
    ipToNum(m[1]!);
  } catch {
    return "has an invalid address";
  }
  const prefix = Number(m[2]);
  if (prefix < 8 || prefix > 29) return "prefix must be between /8 and /29 (a /29 leaves 4 box addresses)";
  return null;
}

export function poolLayout(cidr: string): PoolLayout {
  const problem = cidrProblem(cidr);
  if (problem) throw new Error(`CIDR ${cidr} ${problem}`);
  const [addr, bits] = cidr.split("/") as [string, string];
  const prefix = Number(bits);
  const size = 2 ** (32 - prefix);
  const network = Math.floor(ipToNum(addr) / size) * size;
  const broadcast = network + size - 1;
  return {
    cidr: `${numToIp(network)}/${prefix}`,
    prefix,
    network,
    gateway: network + 1,
    golden: broadcast - 1,
    broadcast,
    first: network + 2,
    last: broadcast - 2,
  };
}

export function poolSize(l: PoolLayout): number {
  return l.last - l.first + 1;
}
