import type { Logger } from "pino";
import type { Accel } from "./args.ts";

/** What the executor's pieces share: host paths, how QEMU is run, and the clock. */
export interface QemuContext {
  dataDir: string;
  imagesDir: string;
  qemuBinary: string;
  netns: string | null;
  log: Logger;
  readyTimeoutMs: number;
  /** Reserved golden identity, outside the box pool (spec page 03 §4a). */
  goldenNet: { ip: string; prefix: number; gateway: string };
  resolveAccel(kernel: string, initrd: string): Promise<{ accel: Accel; tscKhz: number | null }>;
  now(): Date;
}
