import { createHash } from "node:crypto";
import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import { FirecrackerError } from "./errors.ts";

/**
 * One uid/gid per VM, claimed by exclusively creating `<dir>/<uid>` (O_EXCL): concurrent
 * claims never need a lock, and a retried claim for the same owner returns the same uid.
 */
export async function claimUid(dir: string, owner: string, base: number, count: number): Promise<number> {
  await mkdir(dir, { recursive: true });
  const start = createHash("sha256").update(owner).digest().readUInt32BE(0) % count;
  for (let i = 0; i < count; i++) {
    const uid = base + ((start + i) % count);
    const file = path.join(dir, String(uid));
    try {
      await writeFile(file, owner, { flag: "wx" });
      return uid;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
      const holder = await readFile(file, "utf8").catch(() => "");
      if (holder === owner) return uid;
    }
  }
  throw new FirecrackerError("no_uid_free", `all ${count} VM uids from ${base} are in use`);
}

export async function releaseUid(dir: string, uid: number, owner: string): Promise<void> {
  const file = path.join(dir, String(uid));
  const holder = await readFile(file, "utf8").catch(() => null);
  if (holder === owner) await rm(file, { force: true });
}
