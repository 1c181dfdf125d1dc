import { join } from "node:path";
import { BOX_SIZES } from "@doppio/contracts";
import { pino } from "pino";
import { LinuxHostNetwork } from "../../src/net/host-network.ts";
import { QemuExecutor } from "../../src/vmm/qemu/executor.ts";
import { GOLDEN_NET, IMAGES_DIR, REPO } from "../qemu/support.ts";
import { type CpEndpoint, startAgent, type TestAgent, waitForHeartbeat } from "./agent-harness.ts";
import type { TestNetns } from "./netns.ts";

export interface QemuAgent {
  a: TestAgent;
  executor: QemuExecutor;
  network: LinuxHostNetwork;
}

/**
 * An in-process agent on the real QEMU executor, its bridge and VMs inside `ns`, serving
 * the minimal template image built as `version` (buildMinimalImage), heartbeating to `cp`.
 */
export async function startQemuAgent(cp: CpEndpoint, ns: TestNetns, version: string): Promise<QemuAgent> {
  let executor: QemuExecutor | undefined;
  let network: LinuxHostNetwork | undefined;
  const a = await startAgent({
    cpUrl: cp.url,
    token: cp.agentToken,
    listen: true,
    config: { templates: [{ name: "minimal", version, readyPorts: [8000, 8888], memoryMb: 256, vcpu: 1 }] },
    backend: (dataDir) => {
      const log = pino({ level: "warn" });
      network = new LinuxHostNetwork({ bridge: "br-devbox", cidr: "10.0.0.0/16", netns: ns.name, log });
      executor = new QemuExecutor({
        dataDir: join(dataDir, "qemu"),
        imagesDir: IMAGES_DIR,
        network,
        netns: ns.name,
        goldenNet: GOLDEN_NET,
        accel: "auto",
        accelCacheFile: join(REPO, ".data", "qemu-accel.json"),
        // As in production (vmm/qemu/backend.ts): a volume of every box size is ready at start.
        volumeSizesGb: Object.values(BOX_SIZES).map((s) => s.diskGb),
        log,
      });
      return { executor, network };
    },
  });
  await network!.ensureBridge();
  await waitForHeartbeat(cp);
  return { a, executor: executor!, network: network! };
}
