import { join } from "node:path";
import { BOX_SIZES } from "@doppio/contracts";
import type { Logger } from "pino";
import { numToIp, poolLayout } from "../../cidr.ts";
import type { AgentConfig } from "../../config.ts";
import { hostNetworkFor } from "../../net/host-network.ts";
import type { Backend } from "../executor.ts";
import { vmmUidRange } from "./confine.ts";
import { QemuExecutor } from "./executor.ts";

/**
 * The `backend: qemu` executor and host network (main.ts chooses it). Images live in
 * `<dataDir>/images/<template>/<version>/` (scripts/build-image.sh), boxes and golden
 * builds in `<dataDir>/qemu/`. `networkMode: user` runs without a bridge or root.
 * `netns` keeps the bridge and QEMU inside a network namespace (local stack on shared hosts).
 */
export async function createQemuBackend(config: AgentConfig, log: Logger): Promise<Backend> {
  const netns = config.netns ?? null;
  const pool = poolLayout(config.bridge.cidr);
  const metadataPort = config.metadata.enabled ? config.metadata.port : null;
  const hostNet =
    config.networkMode === "tap" ? hostNetworkFor(config, netns, log, vmmUidRange(config.bridge.cidr)) : null;
  const executor = new QemuExecutor({
    dataDir: join(config.dataDir, "qemu"),
    imagesDir: join(config.dataDir, "images"),
    network: hostNet,
    netns,
    goldenNet: { ip: numToIp(pool.golden), prefix: pool.prefix, gateway: numToIp(pool.gateway) },
    accel: "auto",
    userModeMetadataPort: metadataPort,
    userModeGuestForwards: config.userModeHostPorts,
    // Every box size the control plane offers: the first create of each finds a volume ready.
    volumeSizesGb: Object.values(BOX_SIZES).map((s) => s.diskGb),
    log,
  });
  return { executor, network: hostNet };
}
