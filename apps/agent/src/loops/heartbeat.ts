import { statfs } from "node:fs/promises";
import os from "node:os";
import type { Heartbeat, HeartbeatResponse } from "@doppio/contracts";
import type { Logger } from "pino";
import pkg from "../../package.json" with { type: "json" };
import { backoffMs } from "../clock.ts";
import type { AgentConfig } from "../config.ts";
import type { ControlPlane } from "../control-plane.ts";
import { goldenStatus } from "../images/golden-status.ts";
import type { ImageStore } from "../images/store.ts";
import type { WarmPool } from "../pool/warm.ts";
import type { IpPool } from "../store/ip-pool.ts";
import type { JobStore } from "../store/jobs.ts";
import type { Executor } from "../vmm/executor.ts";
import { BackgroundLoop } from "./background-loop.ts";

/** What heartbeats and /health report: the agent package's own version. */
export const AGENT_VERSION: string = pkg.version;

export interface HeartbeatDeps {
  config: AgentConfig;
  executor: Executor;
  /** The host's template images: a golden older than the current image reports "stale". */
  images?: ImageStore | null;
  ipPool: IpPool;
  store: JobStore;
  cp: ControlPlane;
  /** Its clones are not boxes (left out of the inventory); its state is reported; its sizes come back. */
  pool?: Pick<WarmPool, "slugs" | "state" | "setTargets"> | null;
  log: Logger;
  /** The edge's record of box use: sampled before each heartbeat, reported per box. */
  activity?: { sample(): Promise<void>; lastActiveAt(slug: string): number | null } | null;
  /** Sees every answer (the edge takes the control plane's access key from it). */
  onResponse?: (res: HeartbeatResponse) => void;
}

/** The host's truth for the control plane: inventory, capacity, golden status, held jobs. */
async function buildHeartbeat(d: HeartbeatDeps): Promise<Heartbeat> {
  const ips = new Map(d.ipPool.all().map((a) => [a.slug, a.ip]));
  const activity = d.activity ?? null;
  await activity
    ?.sample()
    .catch((err: unknown) => d.log.warn({ err }, "sampling open box connections failed"));
  const parked = d.pool?.slugs() ?? new Set<string>();
  const vms = (await d.executor.list())
    .filter((v) => !parked.has(v.slug))
    .map((v) => {
      const active = activity?.lastActiveAt(v.slug) ?? null;
      return {
        slug: v.slug,
        state: v.state,
        ip: ips.get(v.slug) ?? null,
        ...(active !== null ? { lastActiveAt: new Date(active).toISOString() } : {}),
      };
    });
  const golden: Heartbeat["golden"] = {};
  for (const t of d.config.templates) {
    const g = await goldenStatus(d.executor, d.images ?? null, t.name);
    golden[t.name] = { status: g.status, version: g.status === "missing" ? null : g.version };
  }
  return {
    version: AGENT_VERSION,
    backend: d.executor.backend,
    capacity: d.config.capacity ?? (await measuredCapacity(d.config.dataDir)),
    vms,
    golden,
    jobs: d.store.heldIds(),
    ...(d.pool ? { pool: d.pool.state() } : {}),
  };
}

async function measuredCapacity(dataDir: string): Promise<Heartbeat["capacity"]> {
  let diskGb = 0;
  try {
    const s = await statfs(dataDir);
    diskGb = Math.floor((s.bavail * s.bsize) / 1024 ** 3);
  } catch {
    // an unreadable data dir shows as no disk; the control plane then places nothing here
  }
  return { vcpu: os.cpus().length, memoryMb: Math.floor(os.totalmem() / 1024 ** 2), diskGb };
}

/** Sends a heartbeat every interval (and on wake), remembering what the control plane expects. */
export class HeartbeatLoop extends BackgroundLoop {
  /** Boxes the control plane placed on this host, from the last answer (null before the first). */
  expected: HeartbeatResponse["boxes"] | null = null;
  lastOkAt: Date | null = null;

  constructor(
    private readonly d: HeartbeatDeps,
    private readonly intervalMs: number,
  ) {
    super();
  }

  async beatOnce(): Promise<HeartbeatResponse> {
    const res = await this.d.cp.heartbeat(await buildHeartbeat(this.d));
    this.expected = res.boxes;
    this.lastOkAt = new Date();
    this.d.onResponse?.(res);
    if (res.warmPool) this.d.pool?.setTargets(res.warmPool);
    if (res.drift.length > 0) this.d.log.info({ drift: res.drift }, "control plane reports drift");
    return res;
  }

  protected run(signal: AbortSignal): Promise<void> {
    return this.repeat(signal, {
      intervalMs: this.intervalMs,
      // After a failure, try again sooner than the interval: the control plane wants to know.
      retryMs: (failures) => Math.min(this.intervalMs, backoffMs(failures)),
      pass: () => this.beatOnce(),
      failed: (err, failures) =>
        this.d.log[failures === 1 ? "warn" : "debug"]({ err, failures }, "heartbeat failed"),
    });
  }
}
