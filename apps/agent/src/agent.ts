import { randomUUID } from "node:crypto";
import type { HeartbeatResponse } from "@doppio/contracts";
import type { FastifyInstance, FastifyPluginAsync } from "fastify";
import type { Logger } from "pino";
import { poolLayout } from "./cidr.ts";
import type { Clock } from "./clock.ts";
import type { AgentConfig } from "./config.ts";
import type { ControlPlane } from "./control-plane.ts";
import type { RouteTable } from "./edge/routes.ts";
import { buildApi } from "./http/api.ts";
import type { ImageStore } from "./images/store.ts";
import { defaultRegistry } from "./jobs/handlers/index.ts";
import type { HandlerDeps, ImageBuilder, Registry, RouteWriter } from "./jobs/registry.ts";
import { logOnlyReporter } from "./jobs/reporter.ts";
import { JobRunner } from "./jobs/runner.ts";
import { LogShipper } from "./logs/shipper.ts";
import { ClaimLoop } from "./loops/claim.ts";
import { Deliverer } from "./loops/deliverer.ts";
import { HeartbeatLoop } from "./loops/heartbeat.ts";
import { Reconciler } from "./loops/reconcile.ts";
import { createMetadataListener, type MetadataListener } from "./metadata/listener.ts";
import { createMetrics, type Metrics } from "./metrics.ts";
import { BoxStore } from "./store/boxes.ts";
import { type Db, openStore } from "./store/db.ts";
import { IpPool } from "./store/ip-pool.ts";
import { JobStore } from "./store/jobs.ts";
import type { Executor, HostNetwork } from "./vmm/executor.ts";

export interface AgentDeps {
  config: AgentConfig;
  executor: Executor;
  network: HostNetwork | null;
  cp: ControlPlane;
  routes: RouteWriter & RouteTable;
  clock: Clock;
  log: Logger;
  imageBuilder?: ImageBuilder | null;
  /** Template images on this host (build_image writes them; golden status compares with them). */
  images?: ImageStore | null;
  registry?: Registry;
  metrics?: Metrics;
  onHeartbeat?: (res: HeartbeatResponse) => void;
  /** The edge: its Fastify plugin (mounted unauthenticated) and the Caddy config keeper. */
  edge?: {
    plugin: FastifyPluginAsync<never>;
    options: unknown;
    keeper: { ensureConfig(): Promise<"unchanged" | "loaded"> };
  };
}

/** Everything one agent process runs, built from hand-passed dependencies (main.ts and tests). */
export interface Agent {
  config: AgentConfig;
  db: Db;
  jobs: JobStore;
  boxes: BoxStore;
  ipPool: IpPool;
  runner: JobRunner;
  deliverer: Deliverer;
  heartbeat: HeartbeatLoop;
  claims: ClaimLoop;
  reconciler: Reconciler;
  api: FastifyInstance;
  /** The metadata service guests call (Git credentials); listens with the API. */
  metadata: MetadataListener;
  /** Ships the boxes' serial logs to the control plane (null if the client cannot). */
  logShipper: LogShipper | null;
  metrics: Metrics;
  /** Recovers unfinished work, then starts every loop and the HTTP API; returns the API URL. */
  start(opts?: { listen?: boolean }): Promise<string | null>;
  /** Stops taking work; VMs keep running. */
  stop(): Promise<void>;
}

export async function createAgent(d: AgentDeps): Promise<Agent> {
  const { config, clock, log } = d;
  const metrics = d.metrics ?? createMetrics();
  const db = openStore(config.dataDir);
  const now = () => clock.now();
  const jobs = new JobStore(db);
  const boxes = new BoxStore(db, now);
  const ipPool = new IpPool(db, poolLayout(config.bridge.cidr), now);
  const handlers: HandlerDeps = {
    config,
    executor: d.executor,
    network: d.network,
    ipPool,
    boxes,
    routes: d.routes,
    imageBuilder: d.imageBuilder ?? null,
    images: d.images ?? null,
    clock,
    log,
  };
  const deliverer = new Deliverer({
    store: jobs,
    cp: d.cp,
    clock,
    log: log.child({ loop: "deliver" }),
    metrics,
  });
  const heartbeat = new HeartbeatLoop(
    {
      config,
      executor: d.executor,
      images: d.images ?? null,
      ipPool,
      store: jobs,
      cp: d.cp,
      log: log.child({ loop: "heartbeat" }),
      ...(d.onHeartbeat ? { onResponse: d.onHeartbeat } : {}),
    },
    config.heartbeatIntervalMs,
  );
  const shipLogs = d.cp.shipLogs?.bind(d.cp);
  const logShipper = shipLogs
    ? new LogShipper({
        slugs: () => boxes.all().map((b) => b.slug),
        serialLog: (slug) => d.executor.serialLogPath(slug),
        ship: shipLogs,
        now,
        log: log.child({ loop: "logs" }),
        maxLogBytes: config.serialLogMaxBytes,
      })
    : null;
  const runner = new JobRunner({
    store: jobs,
    registry: d.registry ?? defaultRegistry(),
    handlers,
    clock,
    log,
    metrics,
    concurrency: config.concurrency,
    onEvent: () => deliverer.wake(),
    onFinished: (job) => {
      if (job.action === "build_golden" || job.action === "build_image") heartbeat.wake();
    },
  });
  const claims = new ClaimLoop({
    cp: d.cp,
    store: jobs,
    runner,
    clock,
    log: log.child({ loop: "claim" }),
    waitMs: config.claimWaitMs,
    onAck: () => deliverer.wake(),
  });
  const reconciler = new Reconciler({
    handlers,
    runner,
    metrics,
    log: log.child({ loop: "reconcile" }),
    report: logOnlyReporter(clock, metrics, log.child({ loop: "reconcile" })),
    expected: () => heartbeat.expected?.map((b) => b.slug) ?? null,
    edge: d.edge?.keeper ?? null,
    intervalMs: config.reconcileIntervalMs,
  });

  const enqueueGoldenBuild = (template: string): string => {
    const t = config.templates.find((x) => x.name === template)!;
    const id = `local-${randomUUID()}`;
    jobs.insert({
      id,
      action: "build_golden",
      box: null,
      payload: { template, templateVersion: t.version },
      local: true,
      receivedAt: clock.now().toISOString(),
    });
    runner.enqueue(jobs.get(id)!);
    return id;
  };

  const api = await buildApi({
    config,
    executor: d.executor,
    images: d.images ?? null,
    boxes,
    ipPool,
    jobs,
    metrics,
    log,
    enqueueGoldenBuild,
    edge: d.edge ? { plugin: d.edge.plugin, options: d.edge.options } : undefined,
  });

  const metadata = await createMetadataListener({
    config,
    boxes,
    cp: d.cp,
    clock,
    log,
    gateway: ipPool.gateway(),
  });

  let started = false;
  return {
    config,
    db,
    jobs,
    boxes,
    ipPool,
    runner,
    deliverer,
    heartbeat,
    claims,
    reconciler,
    api,
    metadata,
    logShipper,
    metrics,
    async start(opts = {}) {
      started = true;
      const recovered = jobs.requeueRunning();
      const unfinished = jobs.unfinished();
      if (recovered > 0 || unfinished.length > 0) {
        log.warn({ recovered, queued: unfinished.length }, "resuming jobs left unfinished by the last run");
      }
      for (const j of unfinished) runner.enqueue(j);
      deliverer.start();
      heartbeat.start();
      logShipper?.start();
      reconciler.start();
      claims.start();
      if (opts.listen === false) return null;
      const i = config.listen.lastIndexOf(":");
      const url = await api.listen({
        host: config.listen.slice(0, i),
        port: Number(config.listen.slice(i + 1)),
      });
      await metadata.listen();
      log.info({ url, backend: config.backend }, "agent started");
      return url;
    },
    async stop() {
      if (started) {
        await claims.stop();
        await runner.stop(10_000);
        await reconciler.stop();
        await heartbeat.stop();
        await logShipper?.stop();
        await deliverer.deliverOnce().catch(() => 0);
        await deliverer.stop();
      }
      await api.close();
      await metadata.close();
      d.cp.close?.();
      await d.executor.close();
      db.close();
    },
  };
}
