import { readFileSync } from "node:fs";
import { createServer } from "node:net";

/**
 * Loopback ports for the servers tests and benches start, the one place they come from.
 *
 * A port asked of the kernel (`listen(0)`) comes from its ephemeral range, which every
 * outgoing connection and every other `listen(0)` on the machine draws from too; between
 * picking it and listening on it (a control plane runs its migrations first, seconds under
 * load) something else could take it, and the server then failed with EADDRINUSE. These
 * ports come from just below that range, where the kernel never hands out a port, and each
 * vitest worker (VITEST_POOL_ID) has its own slice of them, so the two workers never draw
 * the same one; within a process they are handed out in turn from a random start.
 */
const SLICE = 1_000;
const WORKERS = 8; // slices 0 (scripts, benches) to 8: vitest's maxWorkers stays below this

function ephemeralLow(): number {
  try {
    const [low] = readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/);
    return Number(low);
  } catch {
    return 32_768; // Linux's default
  }
}

const worker = Math.min(Number(process.env.VITEST_POOL_ID ?? 0) || 0, WORKERS);
const sliceStart = Math.max(ephemeralLow(), 10_024) - (WORKERS + 1) * SLICE + worker * SLICE;
let turn = Math.floor(Math.random() * SLICE);

function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.once("error", () => resolve(false));
    srv.listen(port, "127.0.0.1", () => srv.close(() => resolve(true)));
  });
}

/**
 * A loopback port nothing listens on now, and that nothing but a later call here will pick:
 * for a server to listen on, or to stay closed (a host that refuses connections).
 */
export async function freePort(): Promise<number> {
  for (let tries = 0; tries < SLICE; tries++) {
    const port = sliceStart + (turn++ % SLICE);
    if (await canListen(port)) return port;
  }
  throw new Error(`no free loopback port in ${sliceStart}-${sliceStart + SLICE - 1}`);
}
