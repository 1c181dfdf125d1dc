import { createWriteStream } from "node:fs";
import { open, rename, rm, stat } from "node:fs/promises";
import { createServer, type Server, type Socket } from "node:net";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";
import { setTimeout as delay } from "node:timers/promises";
import { confineSocket } from "./confine.ts";
import { QemuError } from "./errors.ts";
import type { BoxPaths } from "./layout.ts";
import { type QmpClient, waitMigration } from "./qmp.ts";
import { readJson, writeJson } from "./records.ts";

/**
 * A hibernated box's memory and device state: QEMU's migration stream in the box's
 * directory. It exists under its final name only once it is complete and on disk (written
 * to `.partial`, fsynced, renamed), so a crash at any point leaves either no file or a
 * whole one; the manifest beside it says which machine it loads into.
 */
export interface SavedMemory {
  /** The migration stream, which a resume hands its QEMU as `INCOMING_FD` (confine.ts). */
  vmstate: string;
  memoryMb: number;
  vcpu: number;
  bytes: number;
  savedAt: string;
}

interface HibernationPaths {
  vmstate: string;
  partial: string;
  manifest: string;
  /** Unix socket the agent listens on while QEMU streams its state into it. */
  socket: string;
}

export function hibernationPaths(paths: BoxPaths): HibernationPaths {
  const vmstate = join(paths.dir, "memory.vmstate");
  return {
    vmstate,
    partial: `${vmstate}.partial`,
    manifest: join(paths.dir, "memory.json"),
    socket: join(paths.dir, "migrate.sock"),
  };
}

/** The box's saved memory if a complete one is on disk (its size matches the manifest), else null. */
export async function savedMemory(paths: BoxPaths): Promise<SavedMemory | null> {
  const h = hibernationPaths(paths);
  const manifest = await readJson<Omit<SavedMemory, "vmstate">>(h.manifest);
  if (!manifest) return null;
  const size = await stat(h.vmstate).then(
    (s) => s.size,
    () => null,
  );
  if (size === null || size !== manifest.bytes || size === 0) return null;
  return { ...manifest, vmstate: h.vmstate };
}

/** Forgets the saved memory (after a resume, a stop or a failed save): never loaded again. */
export async function discardSavedMemory(paths: BoxPaths): Promise<void> {
  const h = hibernationPaths(paths);
  // The stream first: without it the manifest alone never counts as saved memory.
  await rm(h.vmstate, { force: true });
  await syncDir(paths.dir);
  await Promise.all([h.partial, h.manifest, h.socket].map((f) => rm(f, { force: true })));
}

/**
 * Pauses the guest and streams its state into the box's directory through a unix socket the
 * agent reads (QEMU 7.2 has no `file:` URI, and an `exec:` writer may be killed by QEMU before
 * it has drained its pipe): the agent knows the stream ended at EOF and QEMU says whether it
 * completed. Then fsync, manifest, rename. The VMM is left paused; the caller ends it.
 */
export async function saveMemory(
  qmp: QmpClient,
  paths: BoxPaths,
  now: () => Date,
  opts: { bandwidth?: number | undefined; timeoutMs?: number } = {},
): Promise<SavedMemory> {
  const timeoutMs = opts.timeoutMs ?? 300_000;
  const h = hibernationPaths(paths);
  await Promise.all([h.partial, h.socket].map((f) => rm(f, { force: true })));
  const machine = await machineOf(qmp);
  // A save that completed before the agent died (its job now run again) left the VM in
  // postmigrate, where QEMU refuses another migrate: `cont` takes its disks back first.
  const { status } = await qmp.execute<{ status: string }>("query-status");
  if (status === "postmigrate") await qmp.execute("cont");
  const sink = await listenOnce(h.socket, h.partial);
  try {
    await confineSocket(h.socket, paths.dir);
    await qmp.execute("stop");
    // A clone restored from a mapped golden still has x-ignore-shared on (mapped-ram.ts). Its
    // RAM is private, so the stream carries all of it either way, but the capability also
    // changes the stream's format, which a plain `-incoming` on resume could not read.
    await qmp.execute("migrate-set-capabilities", {
      capabilities: [{ capability: "x-ignore-shared", state: false }],
    });
    await qmp.execute("migrate-set-parameters", { "max-bandwidth": opts.bandwidth ?? 8 * 1024 ** 3 });
    await qmp.execute("migrate", { uri: `unix:${h.socket}` });
    await waitMigration(qmp, timeoutMs, "saving the memory");
    await withTimeout(sink.done, timeoutMs, "the memory stream did not end");
  } catch (err) {
    sink.close();
    await rm(h.partial, { force: true });
    // The VMM may still be alive (the stream broke, not QEMU): its guest runs on as before.
    await qmp.execute("migrate_cancel", undefined, 2_000).catch(() => undefined);
    await qmp.execute("cont", undefined, 2_000).catch(() => undefined);
    // The agent's end failing (a full disk) makes QEMU's own error a broken pipe: the
    // file's error is the cause that tells why (the job runner reads ENOSPC from it).
    const cause = (await sink.failure()) ?? err;
    throw err instanceof QemuError && cause === err
      ? err
      : new QemuError("migration_failed", `saving the memory failed: ${(cause as Error).message}`, { cause });
  } finally {
    sink.close();
    await rm(h.socket, { force: true });
  }
  const fh = await open(h.partial, "r+");
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
  const bytes = (await stat(h.partial)).size;
  const saved = { ...machine, bytes, savedAt: now().toISOString() };
  await writeJson(h.manifest, saved);
  await rename(h.partial, h.vmstate);
  await syncDir(paths.dir);
  return { ...saved, vmstate: h.vmstate };
}

/** The running machine's memory size and vCPU count: a stream loads only into the same machine. */
async function machineOf(qmp: QmpClient): Promise<{ memoryMb: number; vcpu: number }> {
  const mem = await qmp.execute<{ "base-memory": number }>("query-memory-size-summary");
  const cpus = await qmp.execute<unknown[]>("query-cpus-fast");
  return { memoryMb: Math.round(mem["base-memory"] / (1024 * 1024)), vcpu: cpus.length };
}

interface Sink {
  /** Resolves when QEMU's connection ended and every byte is in the file. */
  done: Promise<void>;
  /** Why writing the file failed, if it did (waits up to 1 s for the stream to end first). */
  failure(): Promise<Error | null>;
  close(): void;
}

/** Accepts exactly one connection on `socket` and writes what it sends to `file`. */
async function listenOnce(socket: string, file: string): Promise<Sink> {
  const server: Server = createServer();
  let conn: Socket | null = null;
  // The file's own error (not the connection's): what makes the stream fail on a full disk.
  let fileError: Error | null = null;
  const done = new Promise<void>((resolve, reject) => {
    server.once("connection", (c) => {
      conn = c;
      server.close();
      const out = createWriteStream(file, { mode: 0o600 });
      out.once("error", (err) => {
        fileError = err;
      });
      pipeline(c, out).then(resolve, reject);
    });
    server.once("error", reject);
  });
  done.catch(() => undefined);
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(socket, () => {
      server.off("error", reject);
      resolve();
    });
  });
  return {
    done,
    failure: async () => {
      await Promise.race([done.catch(() => undefined), delay(1_000)]);
      return fileError;
    },
    close: () => {
      server.close();
      (conn as Socket | null)?.destroy();
    },
  };
}

async function withTimeout(p: Promise<void>, ms: number, message: string): Promise<void> {
  const ac = new AbortController();
  try {
    await Promise.race([
      p,
      delay(ms, undefined, { signal: ac.signal }).then(() => {
        throw new QemuError("timeout", message);
      }),
    ]);
  } finally {
    ac.abort();
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
