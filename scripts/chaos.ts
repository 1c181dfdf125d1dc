/**
 * Chaos run (apps/agent/test/multihost/chaos/run.ts): real control-plane replicas on
 * PostgreSQL, agent processes on hosts in their own network namespaces, a stream of box
 * actions, and kill -9 / network cuts chosen by the seed. Exits 1 when an end check fails.
 *
 *   export TEST_DATABASE_URL=$(scripts/postgres.sh start)
 *   npm run chaos -- --jobs 200 --seed 7 [--replicas 2] [--hosts 3]
 */
import { parseArgs } from "node:util";
import { runChaos } from "../apps/agent/test/multihost/chaos/run.ts";

const { values } = parseArgs({
  options: {
    jobs: { type: "string", default: "50" },
    seed: { type: "string", default: "1" },
    replicas: { type: "string", default: "2" },
    hosts: { type: "string", default: "3" },
  },
});
if (!process.env.TEST_DATABASE_URL) {
  console.error("chaos needs PostgreSQL: export TEST_DATABASE_URL=$(scripts/postgres.sh start)");
  process.exit(2);
}
const summary = await runChaos({
  jobs: Number(values.jobs),
  seed: Number(values.seed),
  replicas: Number(values.replicas),
  hosts: Number(values.hosts),
});
process.exit(summary.ok ? 0 : 1);
