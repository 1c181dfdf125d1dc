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
  const tmp = `${file}.${process.pid}.${Date.now()}.tmp`;
  await writeFile(tmp, `${JSON.stringify(rec, null, 2)}\n`, { mode: 0o600 });
  await rename(tmp, file);
}
