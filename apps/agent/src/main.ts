import { LOG_REDACT } from "@doppio/contracts";
import { pino } from "pino";
import { type Agent, createAgent } from "./agent.ts";
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
async function main(): Promise<void> {
  let config: AgentConfig;
  try {
    config = loadConfig(process.argv.slice(2), process.env);
  } catch (err) {
    process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(2);
  }
  const log = pino({ level: config.logLevel, base: { app: "doppio-agent" }, redact: LOG_REDACT });
  const { executor, network } = await loadBackend(config, log, process.env);
  if (process.argv.includes("--teardown-network")) {
    // Operators removing a host: every TAP, the isolation firewall and the bridge go.
    // Run it with the agent stopped, after the boxes' VMs.
    await network?.teardown();
    process.exit(0);
  }
  if (network && config.networkMode === "tap") await network.ensureBridge();
  const routes = new MemoryRouteTable();
  const edge = config.edge ? await (await import("./edge-wiring.ts")).buildEdge(config, routes, log) : null;
  let agent: Agent | null = null;
  const stop = async (signal: string) => {
    log.info({ signal }, "stopping; VMs keep running");
    const force = setTimeout(() => process.exit(1), 20_000);
    force.unref();
    await agent?.stop();
    edge?.stop(); // after the API: edge checks read its store until then
    process.exit(0);
  };
  process.once("SIGINT", () => void stop("SIGINT"));
  process.once("SIGTERM", () => void stop("SIGTERM"));
  // Template images are built on the host (mmdebstrap + recipes in images/); the QEMU and
  // Firecracker executors read them from <dataDir>/images.
  const { builder: imageBuilder, store: images } = (await import("./images/index.ts")).createHostImageBuilder(
    {
      dataDir: config.dataDir,
      log,
    },
  );
  agent = await createAgent({
    config,
    executor,
    network,
    imageBuilder,
    images,
    cp: new HttpControlPlane(config.controlPlaneUrl, config.serverToken),
    routes,
    clock: systemClock,
    log,
    ...(edge ? { edge: edge.deps, onHeartbeat: edge.onHeartbeat } : {}),
  });
  await agent.start();
  edge?.watch();
}

main().catch((err: unknown) => {
  process.stderr.write(`doppio-agent failed to start: ${err instanceof Error ? err.message : String(err)}\n`);
  if (err instanceof Error && err.cause) process.stderr.write(`  cause: ${String(err.cause)}\n`);
  process.exit(1);
});
