import { readFile, rename, writeFile } from "node:fs/promises";
import type { Accel } from "./args.ts";

/** Everything a restore needs to rebuild the golden VM's exact machine. */
export interface GoldenManifest {
  template: string;
  /** The control plane's template version the build was requested for. */
  version: string;
  /** The image it booted: `<imagesDir>/<template>/<imageVersion>`. Older manifests lack it (= version). */
  imageVersion?: string;
  dir: string;
  accel: Accel;
  tscKhz: number | null;
  memoryMb: number;
  vcpu: number;
  kernel: string;
  initrd: string;
  /** The golden VM's root disk at snapshot time: the backing file of every clone. */
  disk: string;
  vmstate: string;
  /**
   * The golden's guest RAM when it was built mapped (mapped-ram.ts): clones map it private
   * and `vmstate` holds device state only. Absent: `vmstate` carries the RAM (streamed).
   */
  memoryFile?: string;
  /** An empty overlay on `disk` that clones copy (absent in older builds: qemu-img). */
  overlayTemplate?: string;
  mac: string;
  /** The template's ports: forwarded to loopback for user-mode clones. */
  readyPorts?: number[];
  builtAt: string;
}

/** What the agent needs about a box after a restart: its origin and network attachment. */
export interface BoxRecord {
  slug: string;
  template: string;
  /** Golden build dir it was restored from, or null for a cold-booted box. */
  goldenDir: string | null;
  kernel: string;
  initrd: string;
  accel: Accel;
  tscKhz: number | null;
  ip: string;
  prefix: number;
  gateway: string;
  mac: string;
  tap: string | null;
  /** guest port -> 127.0.0.1 port, user-mode networking only. */
  forwards: Record<string, number>;
  /**
   * The golden RAM file a mapped restore maps private (mapped-ram.ts). Its RAM block is
   * named "mem", so a migration stream saved from this VM loads only into a VM with the
   * same `memory-backend` id. Absent for streamed restores and cold boots.
   */
  memoryFile?: string;
  /**
   * The directory named on the running QEMU's command line when it differs from the box's
   * own: a warm-pool clone keeps the pool directory it was launched in after its claim moved
   * the directory to the box's name (pool/warm.ts). The process check matches this; the next
   * launch of the box drops it.
   */
  processDir?: string;
  /** Set once the first create reached ready: a retried create must not wipe the box then. */
  created: boolean;
  /**
   * Set from the launch until the guest prints `DOPPIO-READY <generation>` on the serial log
   * after byte `serialFrom`. An agent that restarted in between finds a running VMM whose
   * guest may still be booting: it waits for that line instead of adopting the box as ready.
   */
  booting?: { generation: number; serialFrom: number };
}

export async function readJson<T>(path: string): Promise<T | null> {
  try {
    return JSON.parse(await readFile(path, "utf8")) as T;
  } catch {
    return null;
  }
}

export async function writeJson(path: string, value: unknown): Promise<void> {
  const tmp = `${path}.tmp`;
  await writeFile(tmp, `${JSON.stringify(value, null, 2)}\n`);
  await rename(tmp, path);
}
