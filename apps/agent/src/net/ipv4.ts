/** IPv4 dotted quad <-> 32-bit unsigned number (the host network's own, no other deps). */
export function ipToNum(ip: string): number {
  const parts = ip.split(".");
  if (parts.length !== 4) throw new Error(`not an IPv4 address: ${ip}`);
  let n = 0;
  for (const p of parts) {
    if (!/^\d{1,3}$/.test(p) || Number(p) > 255) throw new Error(`not an IPv4 address: ${ip}`);
    n = n * 256 + Number(p);
  }
  return n;
}

export function numToIp(n: number): string {
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join(".");
}
