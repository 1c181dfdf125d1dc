import type { Logger } from "pino";
import type { HostNetwork } from "../executor.ts";
import type { FirecrackerConfig } from "./config.ts";
import { FirecrackerExecutor, resolveExecName } from "./executor.ts";
import { HostProcesses } from "./process.ts";
import { TcpReadinessProbe } from "./tcp-probe.ts";
import type { Clock } from "./vm-launch.ts";

export { type FirecrackerConfig, firecrackerConfig } from "./config.ts";
export { FirecrackerExecutor } from "./executor.ts";
export { assertPrerequisites } from "./prerequisites.ts";

export const systemClock: Clock = {
  now: () => Date.now(),
  sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
};

/**
 * Production wiring: real jailer processes and TCP readiness. Call `assertPrerequisites`
 * first so a host without KVM or the binaries fails at start with a clear message.
 */
export async function createFirecrackerExecutor(
  cfg: FirecrackerConfig,
  network: HostNetwork,
  log: Logger,
  clock: Clock = systemClock,
): Promise<FirecrackerExecutor> {
  return new FirecrackerExecutor({
    cfg,
    network,
    processes: new HostProcesses(),
    probe: new TcpReadinessProbe(clock),
    clock,
    log,
    execName: await resolveExecName(cfg.firecrackerBin),
  });
}
