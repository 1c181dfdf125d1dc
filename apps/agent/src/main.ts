import { randomUUID } from "node:crypto";
import { realpathSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { type HeartbeatResponse, isTemplateAction, LOG_REDACT } from "@doppio/contracts";
import type { FastifyInstance } from "fastify";
import { type Logger, pino } from "pino";
import { poolLayout } from "./cidr.ts";
import { type Clock, systemClock } from "./clock.ts";
import { type AgentConfig, loadConfig } from "./config.ts";
import { type ControlPlane, HttpControlPlane } from "./control-plane.ts";
import { EdgeAccess, loadOrCreateCookieKey } from "./edge/access.ts";
import { BoxActivity, establishedPeers, touchConnected } from "./edge/activity.ts";
import { HttpCaddyAdmin, parseCaddyAdminAddress } from "./edge/caddy-admin.ts";
import { buildEdgeConfig } from "./edge/caddy-config.ts";
import { ControlPlaneKey, signInRedirect } from "./edge/control-plane-key.ts";
import { EdgeConfigKeeper } from "./edge/edge-config.ts";
import { MemoryRouteTable } from "./edge/routes.ts";
import { Waker } from "./edge/wake.ts";
import { buildApi } from "./http/api.ts";
import { HostImageBuilder, REPO_DIR } from "./images/builder.ts";
import { ImageStore } from "./images/store.ts";
import { defaultRegistry } from "./jobs/handlers/index.ts";
import type { HandlerDeps, ImageBuilder } from "./jobs/registry.ts";
import { logOnlyReporter } from "./jobs/reporter.ts";
import { JobRunner, noSpaceLeft } from "./jobs/runner.ts";
import { LogShipper } from "./logs/shipper.ts";
import { applyBoxSettings } from "./loops/box-settings.ts";
import { ClaimLoop } from "./loops/claim.ts";
import { Deliverer } from "./loops/deliverer.ts";
import { HeartbeatLoop } from "./loops/heartbeat.ts";
import { Reconciler } from "./loops/reconcile.ts";
import { createMetadataListener, type MetadataListener } from "./metadata/listener.ts";
import { createMetrics, type Metrics } from "./metrics.ts";
import { ParkedStore } from "./pool/parked.ts";
import { WarmPool } from "./pool/warm.ts";
import { BoxStore } from "./store/boxes.ts";
import { type Db, openStore } from "./store/db.ts";
import { EdgeAccessStore } from "./store/edge-access.ts";
import { IpPool } from "./store/ip-pool.ts";
import { JobStore } from "./store/jobs.ts";
import type { Backend, Executor, HostNetwork } from "./vmm/executor.ts";
import { createFirecrackerBackend } from "./vmm/firecracker/backend.ts";
import { createQemuBackend } from "./vmm/qemu/backend.ts";

/*
 * The agent process's one wiring file (ARCHITECTURE.md): config → backend → stores → job
 * loop, heartbeat, reconcile, log shipper → HTTP API, metadata service and edge, all built
 * here by hand from typed modules. Tests build the same agent with `buildAgent` and their
 * own I/O edges (test/support/agent-harness.ts), or run `runAgent` as a process
 * (test/support/fake-agent-main.ts).
 */

/** The I/O edges the agent core runs on; main.ts makes the real ones, tests pass their own. */
export interface AgentIo {
  executor: Executor;
  network: HostNetwork | null;
  cp: ControlPlane;
  clock: Clock;
  log: Logger;
  /** Template images on this host and their builder (build_image); null where none are built. */
  images: { store: ImageStore; builder: ImageBuilder } | null;
}

/** Everything one agent process runs. */
export interface Agent {
  config: AgentConfig;
  db: Db;
  jobs: JobStore;
  boxes: BoxStore;
  ipPool: IpPool;
  routes: MemoryRouteTable;
  runner: JobRunner;
  deliverer: Deliverer;
  heartbeat: HeartbeatLoop;
  claims: ClaimLoop;
  reconciler: Reconciler;
  api: FastifyInstance;
  /** The metadata service guests call (Git credentials); listens with the API. */
  metadata: MetadataListener;
  /** Parked clones ahead of demand, per template (pool/warm.ts). */
  pool: WarmPool;
  /** When each box was last used: edge requests and connections, guests' heartbeats. */
  activity: BoxActivity;
  /** Ships the boxes' serial logs to the control plane (null if the client cannot). */
  logShipper: LogShipper | null;
  metrics: Metrics;
  /** Recovers unfinished work, then starts every loop and the HTTP API; returns the API URL. */
  start(opts?: { listen?: boolean }): Promise<string | null>;
  /** Stops taking work; VMs keep running. */
  stop(): Promise<void>;
}

/** The configured VMM backend; each backend's module checks its own host. */
export function createBackend(config: AgentConfig, log: Logger): Promise<Backend> {
  switch (config.backend) {
    case "qemu":
      return createQemuBackend(config, log);
    case "firecracker":
      return createFirecrackerBackend(config, log);
  }
}

/**
 * The edge, on hosts whose config has one: the routes Caddy calls (mounted in the API), the
 * keeper of Caddy's one static config, and the control plane's key from heartbeats.
 */
async function buildEdge(
  config: AgentConfig,
  db: Db,
  routes: MemoryRouteTable,
  cp: ControlPlane,
  clock: Clock,
  activity: BoxActivity,
  log: Logger,
) {
  if (!config.edge || !config.caddyAdmin) return null;
  const { edge: edgeCfg, caddyAdmin } = config;
  const key = new ControlPlaneKey(edgeCfg.controlPlaneKeyFile);
  const access = new EdgeAccess({
    get controlPlaneKey() {
      return key.key;
    },
    cookieKey: await loadOrCreateCookieKey(config.dataDir),
    now: () => Date.now(),
    ledger: new EdgeAccessStore(db),
  });
  const desired = buildEdgeConfig({
    domain: config.domain,
    adminListen: parseCaddyAdminAddress(caddyAdmin)!.listen,
    agentDial: config.listen,
    tls: edgeCfg.tls,
    storageDir: `${config.dataDir}/caddy`,
  });
  const keeper = new EdgeConfigKeeper(new HttpCaddyAdmin({ address: caddyAdmin }), desired, log);
  const signIn = edgeCfg.signInUrl;
  const wakeBox = cp.wakeBox?.bind(cp);
  const waker = wakeBox
    ? new Waker({ ask: wakeBox, now: () => clock.now().getTime(), log: log.child({ edge: "wake" }) })
    : null;
  return {
    plugin: {
      domain: config.domain,
      routes,
      access,
      activity,
      ...(waker ? { wake: (slug: string) => void waker.wake(slug) } : {}),
      ...(signIn ? { signInUrl: signInRedirect(signIn) } : {}),
    },
    // Open WebSockets send no requests: their connections from Caddy to the guest count.
    async sampleConnections() {
      touchConnected(routes.slugs(), routes, await establishedPeers(config.netns ?? null), activity);
    },
    keeper,
    checkIntervalMs: edgeCfg.checkIntervalMs,
    onHeartbeat(res: HeartbeatResponse) {
      try {
        access.endSessions(res.endedSessions);
      } catch (err) {
        log.error({ err }, "could not record the control plane's signed-out sessions");
      }
      key.update(res.accessPublicKey, log);
    },
  };
}

/** The agent core on the given I/O edges: stores, loops, HTTP API, metadata service, edge. */
export async function buildAgent(config: AgentConfig, io: AgentIo): Promise<Agent> {
  const { clock, log, cp, executor } = io;
  const metrics = createMetrics();
  const db = openStore(config.dataDir);
  const now = () => clock.now();
  const jobs = new JobStore(db);
  const boxes = new BoxStore(db, now);
  const ipPool = new IpPool(db, poolLayout(config.bridge.cidr), now);
  const routes = new MemoryRouteTable();
  // Box use as the edge and the guests report it; heartbeats carry it (idle hibernation).
  const activity = new BoxActivity(() => clock.now().getTime());
  const edge = await buildEdge(config, db, routes, cp, clock, activity, log);
  const images = io.images?.store ?? null;
  const parked = new ParkedStore(db, ipPool, now);
  const pool = new WarmPool({
    config,
    executor,
    ipPool,
    parked,
    clock,
    log,
    report: logOnlyReporter(clock, metrics, log.child({ loop: "warm-pool" })),
  });
  const handlers: HandlerDeps = {
    config,
    executor,
    network: io.network,
    ipPool,
    boxes,
    routes,
    imageBuilder: io.images?.builder ?? null,
    images,
    pool,
    clock,
    log,
  };
  const deliverer = new Deliverer({ store: jobs, cp, clock, log: log.child({ loop: "deliver" }), metrics });
  const heartbeat = new HeartbeatLoop(
    {
      config,
      executor,
      images,
      ipPool,
      store: jobs,
      cp,
      pool,
      log: log.child({ loop: "heartbeat" }),
      activity: {
        lastActiveAt: (slug: string) => activity.lastActiveAt(slug),
        sample: async () => edge?.sampleConnections(),
      },
      onResponse: (res) => {
        const changed = applyBoxSettings({ boxes, routes }, res.boxes);
        if (changed.length > 0) log.info({ boxes: changed }, "box wake settings changed");
        edge?.onHeartbeat(res);
      },
    },
    config.heartbeatIntervalMs,
  );
  const shipLogs = cp.shipLogs?.bind(cp);
  const logShipper = shipLogs
    ? new LogShipper({
        slugs: () => boxes.all().map((b) => b.slug),
        serialLog: (slug) => executor.serialLogPath(slug),
        ship: shipLogs,
        now,
        log: log.child({ loop: "logs" }),
        maxLogBytes: config.serialLogMaxBytes,
      })
    : null;
  const runner = new JobRunner({
    store: jobs,
    registry: defaultRegistry(),
    handlers,
    clock,
    log,
    metrics,
    concurrency: config.concurrency,
    onEvent: () => deliverer.wake(),
    onFinished: (job) => {
      if (isTemplateAction(job.action)) {
        heartbeat.wake();
        // A golden that became ready can fill the warm pool.
        pool.refill();
      }
    },
  });
  const claims = new ClaimLoop({
    cp,
    store: jobs,
    runner,
    clock,
    log: log.child({ loop: "claim" }),
    waitMs: config.claimWaitMs,
    onAck: () => deliverer.wake(),
  });
  const reconcileLog = log.child({ loop: "reconcile" });
  const reconciler = new Reconciler({
    handlers,
    runner,
    metrics,
    log: reconcileLog,
    report: logOnlyReporter(clock, metrics, reconcileLog),
    expected: () => heartbeat.expected?.map((b) => b.slug) ?? null,
    pool,
    edge: edge?.keeper ?? null,
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
    executor,
    images,
    boxes,
    ipPool,
    jobs,
    metrics,
    log,
    enqueueGoldenBuild,
    edge: edge?.plugin,
    lastHeartbeatAt: () => heartbeat.lastOkAt,
  });
  const metadata = await createMetadataListener({
    config,
    boxes,
    cp,
    clock,
    log,
    gateway: ipPool.gateway(),
    activity,
    pool,
  });

  let started = false;
  return {
    config,
    db,
    jobs,
    boxes,
    ipPool,
    routes,
    runner,
    deliverer,
    heartbeat,
    claims,
    reconciler,
    api,
    metadata,
    pool,
    activity,
    logShipper,
    metrics,
    async start(opts = {}) {
      started = true;
      // A full disk must not stop the agent from starting: the runner holds such jobs until it has room.
      let recovered = 0;
      try {
        recovered = jobs.requeueRunning();
      } catch (err) {
        if (!noSpaceLeft(err)) throw err;
        log.error({ err }, "the agent's store is full: jobs left running wait for room");
      }
      const unfinished = jobs.unfinished();
      if (recovered > 0 || unfinished.length > 0) {
        log.warn({ recovered, queued: unfinished.length }, "resuming jobs left unfinished by the last run");
      }
      for (const j of unfinished) runner.enqueue(j);
      await pool.adopt();
      pool.refill();
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
      // Faster than reconcile at noticing a restarted Caddy.
      edge?.keeper.watch(edge.checkIntervalMs);
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
      await pool.close();
      await api.close();
      await metadata.close();
      edge?.keeper.stop();
      cp.close?.();
      await executor.close();
      db.close(); // after the API: edge checks read the store until then
    },
  };
}

/**
 * The agent process: parse the config, build the backend and the agent, run until SIGINT or
 * SIGTERM. VMs keep running when it stops (they are not our children in the process-lifetime
 * sense: the next agent adopts them). `--teardown-network` instead removes the host's box
 * network. `backendFor` is `createBackend` except in test support.
 */
export async function runAgent(
  argv: readonly string[],
  env: NodeJS.ProcessEnv,
  backendFor: (config: AgentConfig, log: Logger) => Promise<Backend> = createBackend,
): Promise<void> {
  let config: AgentConfig;
  try {
    config = loadConfig(argv, env);
  } catch (err) {
    process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(2);
  }
  const log = pino({ level: config.logLevel, base: { app: "doppio-agent" }, redact: LOG_REDACT });
  const { executor, network } = await backendFor(config, log);
  if (argv.includes("--teardown-network")) {
    // Operators removing a host: every TAP, the isolation firewall and the bridge go.
    // Run it with the agent stopped, after the boxes' VMs.
    await network?.teardown();
    process.exit(0);
  }
  if (network && config.networkMode === "tap") await network.ensureBridge();
  let agent: Agent | null = null;
  const stop = async (signal: string) => {
    log.info({ signal }, "stopping; VMs keep running");
    const force = setTimeout(() => process.exit(1), 20_000);
    force.unref();
    await agent?.stop();
    process.exit(0);
  };
  process.once("SIGINT", () => void stop("SIGINT"));
  process.once("SIGTERM", () => void stop("SIGTERM"));
  // Template images are built on the host (mmdebstrap + recipes in images/) into the
  // directory the QEMU and Firecracker backends read.
  const store = new ImageStore(join(config.dataDir, "images"));
  agent = await buildAgent(config, {
    executor,
    network,
    cp: new HttpControlPlane(config.controlPlaneUrl, config.serverToken),
    clock: systemClock,
    log,
    images: { store, builder: new HostImageBuilder({ repoDir: REPO_DIR, store, log }) },
  });
  await agent.start();
}

export function failedToStart(err: unknown): never {
  process.stderr.write(`doppio-agent failed to start: ${err instanceof Error ? err.message : String(err)}\n`);
  if (err instanceof Error && err.cause) process.stderr.write(`  cause: ${String(err.cause)}\n`);
  process.exit(1);
}

/** True when this file is the program (systemd unit, `make up`, tests' processes), not an import. */
function startedAsProgram(): boolean {
  try {
    return realpathSync(process.argv[1] ?? "") === fileURLToPath(import.meta.url);
  } catch {
    return false;
  }
}

if (startedAsProgram()) runAgent(process.argv.slice(2), process.env).catch(failedToStart);
