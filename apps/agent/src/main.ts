import { readFileSync } from "node:fs";
import type { FastifyPluginAsync } from "fastify";
import { pino } from "pino";
import { type Agent, type AgentDeps, createAgent } from "./agent.ts";
import { loadBackend } from "./backends.ts";
import { systemClock } from "./clock.ts";
import { type AgentConfig, loadConfig } from "./config.ts";
import { HttpControlPlane } from "./control-plane.ts";
import { MemoryRouteTable } from "./edge/routes.ts";

/**
 * Wiring file for the agent process: config → store → executor → loops → HTTP API.
 * SIGINT/SIGTERM stop taking work and exit; VMs keep running (they are not our children
 * in the process-lifetime sense: the next agent adopts them).
 */
async function edgeDeps(
  config: AgentConfig,
  routes: MemoryRouteTable,
  log: pino.Logger,
): Promise<AgentDeps["edge"]> {
  if (!config.edge || !config.caddyAdminUrl) return undefined;
  // Imported lazily: a host without an edge never loads it.
  const edge = await import("./edge/index.ts");
  const { publicKeyFromPem } = await import("@doppio/access-token");
  const access = new edge.EdgeAccess({
    controlPlaneKey: publicKeyFromPem(readFileSync(config.edge.controlPlaneKeyFile, "utf8")),
    cookieKey: await edge.loadOrCreateCookieKey(config.dataDir),
    now: () => Date.now(),
  });
  const admin = new URL(config.caddyAdminUrl);
  const desired = edge.buildEdgeConfig({
    domain: config.domain,
    adminListen: admin.host,
    agentDial: config.listen,
    tls: config.edge.tls,
  });
  const keeper = new edge.EdgeConfigKeeper(
    new edge.HttpCaddyAdmin({ baseUrl: config.caddyAdminUrl }),
    desired,
    log,
  );
  keeper.watch(config.edge.checkIntervalMs);
  const signIn = config.edge.signInUrl;
  return {
    plugin: edge.edgePlugin as unknown as FastifyPluginAsync<never>,
    options: {
      domain: config.domain,
      routes,
      access,
      ...(signIn
        ? {
            signInUrl: ({ slug, uri }: { slug: string; uri: string }) => {
              const u = new URL(signIn);
              u.searchParams.set("box", slug);
              u.searchParams.set("next", uri);
              return u.toString();
            },
          }
        : {}),
    },
    keeper,
  };
}

async function main(): Promise<void> {
  let config: AgentConfig;
  try {
    config = loadConfig(process.argv.slice(2), process.env);
  } catch (err) {
    process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(2);
  }
  const log = pino({ level: config.logLevel, base: { app: "doppio-agent" } });
  const { executor, network } = await loadBackend(config, log, process.env);
  if (network && config.networkMode === "tap") await network.ensureBridge();
  const routes = new MemoryRouteTable();
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
  agent = await createAgent({
    config,
    executor,
    network,
    cp: new HttpControlPlane(config.controlPlaneUrl, config.serverToken),
    routes,
    clock: systemClock,
    log,
    edge: await edgeDeps(config, routes, log),
  });
  await agent.start();
}

main().catch((err: unknown) => {
  process.stderr.write(`doppio-agent failed to start: ${err instanceof Error ? err.message : String(err)}\n`);
  if (err instanceof Error && err.cause) process.stderr.write(`  cause: ${String(err.cause)}\n`);
  process.exit(1);
});
