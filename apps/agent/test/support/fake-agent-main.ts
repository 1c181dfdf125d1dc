import { failedToStart, runAgent } from "../../src/main.ts";
import { FakeExecutor, type FakeExecutorOptions } from "./fake-executor.ts";

/**
 * The agent process exactly as main.ts runs it, on the recording fake executor instead of
 * the configured backend, for tests that kill and restart a real agent process
 * (agent-process.ts). The fake's options come as JSON in DOPPIO_TEST_FAKE_EXECUTOR.
 */
const options = JSON.parse(process.env.DOPPIO_TEST_FAKE_EXECUTOR ?? "{}") as FakeExecutorOptions;
runAgent(process.argv.slice(2), process.env, async () => {
  const fake = new FakeExecutor(options);
  return { executor: fake, network: fake };
}).catch(failedToStart);
