/** Where a QEMU process's memory goes, read from /proc (bench:memory, bench:tcg). */
import { readFileSync } from "node:fs";

/** Where a VMM's memory goes, by mapping: its guest's RAM, TCG's code buffer, the rest. */
export const KINDS = ["guest RAM", "TCG code buffer", "other anonymous", "files and libraries"] as const;
export type Kind = (typeof KINDS)[number];

/** PSS (kB) of one QEMU process by kind, from /proc/PID/smaps (the guest RAM is the mapping of its size). */
export function pssByKind(pid: number, guestMb: number): Map<Kind, number> {
  const out = new Map<Kind, number>(KINDS.map((k) => [k, 0]));
  let kind: Kind = "other anonymous";
  for (const line of readFileSync(`/proc/${pid}/smaps`, "utf8").split("\n")) {
    const head = /^([0-9a-f]+)-([0-9a-f]+) (\S{4}) \S+ \S+ (\d+)\s*(.*)$/.exec(line);
    if (head) {
      const bytes = Number.parseInt(head[2]!, 16) - Number.parseInt(head[1]!, 16);
      const [perms, inode, name] = [head[3]!, head[4]!, head[5]!];
      if (bytes === guestMb * 1024 * 1024) kind = "guest RAM";
      else if (inode !== "0" && !name.startsWith("/memfd:")) kind = "files and libraries";
      else if (perms.includes("x")) kind = "TCG code buffer";
      else kind = "other anonymous";
      continue;
    }
    const pss = /^Pss:\s+(\d+)/.exec(line);
    if (pss) out.set(kind, out.get(kind)! + Number(pss[1]));
  }
  return out;
}
