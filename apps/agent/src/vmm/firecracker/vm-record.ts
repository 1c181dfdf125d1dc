import { randomBytes } from "node:crypto";
import { readFile, rename, writeFile } from "node:fs/promises";

/** What the agent remembers about a box on disk (`vms/<slug>/vm.json`). */
export interface VmRecord {
  slug: string;
  jailId: string;
  uid: number;
  gid: number;
  ip: string;
  tap: string | null;
  template: string;
  /** Golden build the disks were cloned from; null after a cold-boot create. */
  goldenBuild: string | null;
  pid: number | null;
  /** `stopped` only when stop() ran; a dead VMM without it counts as exited (crashed). */
  lifecycle: "creating" | "running" | "stopped";
  /**
   * False from the VMM's (re)start until its guest answered the ready ports: a start cut off
   * there (agent restart) is finished by the next one. Absent: ready (older records).
   */
  ready?: boolean;
}

export async function readRecord(file: string): Promise<VmRecord | null> {
  try {
    return JSON.parse(await readFile(file, "utf8")) as VmRecord;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw err;
  }
}

/** Write-then-rename so a crash never leaves half a record. */
export async function writeRecord(file: string, rec: VmRecord): Promise<void> {
  // Unique per write: two writes of one record in the same millisecond must not share it.
  const tmp = `${file}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`;
  await writeFile(tmp, `${JSON.stringify(rec, null, 2)}\n`, { mode: 0o600 });
  await rename(tmp, file);
}
