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
  /**
   * How golden snapshots keep guest RAM: `mapped` in a file that clones map copy-on-write
   * (mapped-ram.ts), `streamed` inside the migration stream that each restore copies.
   */
  goldenMemory: "mapped" | "streamed";
  /** Each box's VMM runs as its own unprivileged uid (confine.ts); needs the agent to be root. */
  confineVmms: boolean;
  /** TCG guests' translated code, at most (MiB; args.ts TCG_CODE_BUFFER_MB). */
  tcgCodeBufferMb: number;
  resolveAccel(kernel: string, initrd: string): Promise<{ accel: Accel; tscKhz: number | null }>;
  now(): Date;
}
