import { chown, mkdir, open, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import path from "node:path";
import { makeDirs } from "../../make-dirs.ts";
import type { FirecrackerClient } from "./api-client.ts";
import { linkOrClone } from "./disks.ts";
import type { HostLayout } from "./layout.ts";

/** Where the VMM writes a hibernation snapshot inside its jail (made writable for it first). */
const IN_JAIL_HIBERNATE = {
  dir: "/hibernate",
  vmstate: "/hibernate/vmstate",
  mem: "/hibernate/mem",
} as const;

/**
 * A hibernated box's snapshot in its VM dir: `memory/{vmstate,mem,info.json}`. It is built
 * in `memory.partial/`, every file fsynced, and renamed into place in one step, so a crash
 * leaves either no `memory/` or a whole one; sizes in `info.json` are checked on every read.
 */
export interface SavedMemory {
  vmstate: string;
  mem: string;
  /** The guest's memory size (the memory file is all of it): the jail's memory limit on resume. */
  memoryMb: number;
  bytes: number;
  savedAt: string;
}

interface Info {
  vmstateBytes: number;
  memBytes: number;
  savedAt: string;
}

function dirs(layout: HostLayout, slug: string) {
  const dir = layout.vmDir(slug);
  return { dir, final: path.join(dir, "memory"), partial: path.join(dir, "memory.partial") };
}

export async function savedMemory(layout: HostLayout, slug: string): Promise<SavedMemory | null> {
  const { final } = dirs(layout, slug);
  const info = await readFile(path.join(final, "info.json"), "utf8").then(
    (t) => JSON.parse(t) as Info,
    () => null,
  );
  if (!info) return null;
  const vmstate = path.join(final, "vmstate");
  const mem = path.join(final, "mem");
  const [vs, ms] = await Promise.all(
    [vmstate, mem].map((f) =>
      stat(f).then(
        (s) => s.size,
        () => null,
      ),
    ),
  );
  if (vs !== info.vmstateBytes || ms !== info.memBytes || !vs || !ms) return null;
  return {
    vmstate,
    mem,
    memoryMb: Math.max(1, Math.ceil(info.memBytes / (1024 * 1024))),
    bytes: info.vmstateBytes + info.memBytes,
    savedAt: info.savedAt,
  };
}

/** Forgets the saved memory (after a resume, a stop or a failed save): never loaded again. */
export async function discardSavedMemory(layout: HostLayout, slug: string): Promise<void> {
  const { dir, final, partial } = dirs(layout, slug);
  await rm(final, { recursive: true, force: true });
  await rm(partial, { recursive: true, force: true });
  await syncDir(dir).catch(() => undefined);
}

/** Gives the jailed VMM a directory it may write its snapshot into. */
export async function prepareSnapshotDir(
  layout: HostLayout,
  jailId: string,
  uid: number,
  gid: number,
): Promise<void> {
  const dir = layout.inJail(jailId, IN_JAIL_HIBERNATE.dir);
  await rm(dir, { recursive: true, force: true });
  await makeDirs(dir, 0o700);
  await chown(dir, uid, gid);
}

/** Pauses the guest and has Firecracker write a full snapshot into the jail. */
export async function snapshotPaused(client: FirecrackerClient): Promise<void> {
  await client.patchVm("Paused");
  await client.createSnapshot({
    snapshot_type: "Full",
    snapshot_path: IN_JAIL_HIBERNATE.vmstate,
    mem_file_path: IN_JAIL_HIBERNATE.mem,
  });
}

/**
 * Moves the snapshot the (now ended) VMM wrote in its jail to the box's VM dir: links (or
 * copies) into `memory.partial/`, fsyncs, then renames the directory into place.
 */
export async function commitSnapshot(
  layout: HostLayout,
  slug: string,
  jailId: string,
  now: () => number,
): Promise<SavedMemory> {
  const { dir, final, partial } = dirs(layout, slug);
  await rm(partial, { recursive: true, force: true });
  await mkdir(partial, { mode: 0o700 });
  const info: Info = { vmstateBytes: 0, memBytes: 0, savedAt: new Date(now()).toISOString() };
  for (const [name, inJail] of [
    ["vmstate", IN_JAIL_HIBERNATE.vmstate],
    ["mem", IN_JAIL_HIBERNATE.mem],
  ] as const) {
    const target = path.join(partial, name);
    await linkOrClone(layout.inJail(jailId, inJail), target);
    await chown(target, 0, 0);
    await syncFile(target);
    const bytes = (await stat(target)).size;
    if (name === "vmstate") info.vmstateBytes = bytes;
    else info.memBytes = bytes;
  }
  await writeFile(path.join(partial, "info.json"), `${JSON.stringify(info)}\n`, { mode: 0o600 });
  await syncFile(path.join(partial, "info.json"));
  await syncDir(partial);
  await rm(final, { recursive: true, force: true });
  await rename(partial, final);
  await syncDir(dir);
  const saved = await savedMemory(layout, slug);
  if (!saved) throw new Error(`snapshot of ${slug} did not read back whole`);
  return saved;
}

async function syncFile(file: string): Promise<void> {
  const fh = await open(file, "r+");
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

async function syncDir(dir: string): Promise<void> {
  const fh = await open(dir, "r");
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}
