import { join } from "node:path";
import type { Logger } from "pino";
import { numToIp, poolLayout } from "../../cidr.ts";
import type { AgentConfig } from "../../config.ts";
import { hostNetworkFor } from "../../net/host-network.ts";
import { macForIp, tapNameForIp } from "../../net/naming.ts";
import type { Backend } from "../executor.ts";
import { assertPrerequisites, createFirecrackerExecutor, firecrackerConfig } from "./index.ts";

/**
 * The `backend: firecracker` executor and host network (main.ts chooses it). The host is checked
 * first (binaries and versions, /dev/kvm, cgroup v2 with the memory controller), so an
 * unready host fails at start with every problem listed. Boxes use bridge + TAP networking.
 */
export async function createFirecrackerBackend(config: AgentConfig, log: Logger): Promise<Backend> {
  if (config.networkMode !== "tap") {
    throw new Error('backend "firecracker" needs networkMode "tap" (a bridge and one TAP per VM)');
  }
  const stateDir = join(config.dataDir, "firecracker");
  const defaults = firecrackerConfig({ stateDir });
  const host = await assertPrerequisites({
    firecrackerBin: defaults.firecrackerBin,
    jailerBin: defaults.jailerBin,
  });
  const pool = poolLayout(config.bridge.cidr);
  const goldenIp = numToIp(pool.golden);
  const cfg = firecrackerConfig({
    stateDir,
    imagesDir: join(config.dataDir, "images"),
    cgroupRoot: host.cgroup2Mount ?? defaults.cgroupRoot,
    golden: {
      ...defaults.golden,
      net: {
        ip: goldenIp,
        prefix: pool.prefix,
        gateway: numToIp(pool.gateway),
        mac: macForIp(goldenIp),
        tap: tapNameForIp(goldenIp),
        dns: config.dns,
      },
    },
  });
  const hostNet = hostNetworkFor(config, null, log, {
    first: cfg.uidBase,
    last: cfg.uidBase + cfg.uidCount - 1,
  });
  const executor = await createFirecrackerExecutor(cfg, hostNet, log);
  log.info({ firecracker: host.firecrackerVersion, cgroup: host.cgroup2Mount }, "firecracker backend ready");
  return { executor, network: hostNet };
}
