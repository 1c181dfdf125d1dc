import type { Logger } from "pino";
import type { AgentConfig } from "./config.ts";
import { AgentError } from "./errors.ts";
import type { Executor, HostNetwork } from "./vmm/executor.ts";

export interface Backend {
  executor: Executor;
  network: HostNetwork | null;
}

/**
 * Convention for backend modules (so a missing or broken backend never breaks the other):
 * `vmm/<backend>/backend.ts` exports `createBackend(config, log): Promise<Backend>`.
 * Imported lazily, only for the configured backend.
 */
const MODULES: Record<"qemu" | "firecracker", string> = {
  qemu: "./vmm/qemu/backend.ts",
  firecracker: "./vmm/firecracker/backend.ts",
};

export async function loadBackend(
  config: AgentConfig,
  log: Logger,
  env: NodeJS.ProcessEnv,
): Promise<Backend> {
  if (config.backend === "fake") {
    if (env.DOPPIO_AGENT_ALLOW_FAKE !== "1") {
      throw new AgentError(
        "backend_unavailable",
        'backend "fake" is a test double and runs only with DOPPIO_AGENT_ALLOW_FAKE=1',
      );
    }
    const { FakeExecutor } = await import("./vmm/fake.ts");
    const fake = new FakeExecutor(config.fake);
    log.warn({ backend: "fake" }, "running with the in-memory test double executor: no VMs are real");
    return { executor: fake, network: fake };
  }
  const spec = MODULES[config.backend];
  let mod: { createBackend?: (c: AgentConfig, l: Logger) => Promise<Backend> };
  try {
    mod = (await import(new URL(spec, import.meta.url).href)) as typeof mod;
  } catch (err) {
    throw new AgentError(
      "backend_unavailable",
      `backend "${config.backend}" is not available (${spec} failed to load)`,
      {
        cause: err,
      },
    );
  }
  if (typeof mod.createBackend !== "function") {
    throw new AgentError(
      "backend_unavailable",
      `backend "${config.backend}": ${spec} does not export createBackend`,
    );
  }
  return mod.createBackend(config, log);
}
