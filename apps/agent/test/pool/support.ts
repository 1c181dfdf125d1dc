import type { ChildProcess } from "node:child_process";
import { join } from "node:path";
import { BOX_SIZES } from "@doppio/contracts";
import { pino } from "pino";
import { systemClock } from "../../src/clock.ts";
import { HttpControlPlane } from "../../src/control-plane.ts";
import { type Agent, buildAgent } from "../../src/main.ts";
import { LinuxHostNetwork } from "../../src/net/host-network.ts";
import type { StepReporter } from "../../src/vmm/executor.ts";
import { QemuExecutor } from "../../src/vmm/qemu/executor.ts";
import { GOLDEN_NET, IMAGES_DIR, REPO } from "../qemu/support.ts";
import { type CpEndpoint, testConfig } from "../support/agent-harness.ts";
import type { TestNetns } from "../support/netns.ts";
import { listenInNetns } from "../support/netns-listener.ts";

const GATEWAY = "10.0.0.1";
const METADATA_PORT = 8169;

export interface PoolAgent {
  agent: Agent;
  executor: QemuExecutor;
  network: LinuxHostNetwork;
  /** Stops the agent (VMs keep running, as after `systemctl restart`) and its metadata listener. */
  stop(): Promise<void>;
}

/**
 * The real agent core (main.ts's buildAgent) on the real QEMU executor in `ns`, with a warm
 * pool of `size` minimal clones and its metadata service answering guests on the bridge's
 * gateway inside `ns` (a socket opened there: the service sees the guests' own addresses,
 * so tap mode's source check is the real one). `dataDir` survives a stop, so a second call
 * is an agent restart on the same host.
 */
export async function startPoolAgent(
  cp: Pick<CpEndpoint, "url" | "agentToken">,
  ns: TestNetns,
  dataDir: string,
  imageVersion: string,
  size: number,
  /** The pool's data-volume size (the default box size's unless given). */
  diskGb: number = BOX_SIZES.small.diskGb,
): Promise<PoolAgent> {
  const log = pino({ level: process.env.DOPPIO_TEST_LOG ?? "silent" });
  const network = new LinuxHostNetwork({
    bridge: "br-devbox",
    cidr: "10.0.0.0/16",
    netns: ns.name,
    gatewayPorts: [METADATA_PORT],
    log,
  });
  await network.ensureBridge();
  const executor = new QemuExecutor({
    dataDir: join(dataDir, "qemu"),
    imagesDir: IMAGES_DIR,
    network,
    netns: ns.name,
    goldenNet: GOLDEN_NET,
    accel: "auto",
    accelCacheFile: join(REPO, ".data", "qemu-accel.json"),
    volumeSizesGb: [...new Set([BOX_SIZES.small.diskGb, diskGb])],
    log,
  });
  const config = testConfig({
    controlPlaneUrl: cp.url,
    serverToken: cp.agentToken,
    dataDir,
    templates: [{ name: "minimal", version: "1", readyPorts: [8000, 8888], memoryMb: 256, vcpu: 1 }],
    warmPool: { sizes: { minimal: size }, diskGb },
  });
  const agent = await buildAgent(config, {
    executor,
    network,
    cp: new HttpControlPlane(config.controlPlaneUrl, config.serverToken, 5_000),
    clock: systemClock,
    log,
    images: null,
  });
  // Before start: the golden (built on the first start, found on disk after) lets the pool fill.
  if ((await executor.goldenStatus("minimal")).status !== "ready") {
    const template = {
      name: "minimal",
      version: "1",
      imageVersion,
      readyPorts: [8000, 8888],
      memoryMb: 256,
      vcpu: 1,
    };
    const built = await executor.buildGolden(template, noReport);
    if (built.status !== "ready") throw new Error(`golden: ${built.error ?? built.status}`);
  }
  const listener = await listenInNetns(ns, GATEWAY, METADATA_PORT);
  await agent.metadata.app.ready();
  agent.metadata.app.server.listen(listener.server);
  await agent.start({ listen: false });
  return {
    agent,
    executor,
    network,
    async stop() {
      await agent.runner.idle();
      await agent.stop();
      stopChild(listener.child);
    },
  };
}

const noReport: StepReporter = {
  step: (_name, fn) => fn(),
  log: () => undefined,
};

function stopChild(child: ChildProcess): void {
  if (child.pid && child.exitCode === null) process.kill(child.pid, "SIGTERM");
}
