/**
 * Chaos run (apps/agent/test/multihost/chaos/run.ts): real control-plane replicas on
 * PostgreSQL, agent processes on hosts in their own network namespaces, a stream of box
 * actions, and faults chosen by the seed (kill -9 of agents, replicas, VMMs and Caddy,
 * network cuts, a PostgreSQL crash, a full disk). Exits 1 when an end check fails.
 *
 *   npm run chaos -- --jobs 200 --seed 7 [--replicas 2] [--hosts 3] [--backend fake|qemu]
 *
 * `--backend qemu` runs the agent program itself (src/main.ts) on each host with real QEMU
 * guests of the minimal template (TCG here; needs root, QEMU and Caddy); the default `fake`
 * stands a `sleep` process in for each VMM.
 *
 * As root it runs its own PostgreSQL; otherwise export TEST_DATABASE_URL=$(scripts/postgres.sh start).
 */
import { parseArgs } from "node:util";
import { qemuModeUnavailable } from "../apps/agent/test/multihost/chaos/cluster.ts";
import { privatePostgresUnavailable } from "../apps/agent/test/multihost/chaos/private-postgres.ts";
import { runChaos } from "../apps/agent/test/multihost/chaos/run.ts";

const { values } = parseArgs({
  options: {
    jobs: { type: "string", default: "50" },
    seed: { type: "string", default: "1" },
    replicas: { type: "string", default: "2" },
    hosts: { type: "string", default: "3" },
    backend: { type: "string", default: "fake" },
  },
});
if (values.backend !== "fake" && values.backend !== "qemu") {
  console.error(`--backend is fake or qemu, not ${values.backend}`);
  process.exit(2);
}
const whyNoQemu = values.backend === "qemu" ? qemuModeUnavailable() : null;
if (whyNoQemu) {
  console.error(`chaos --backend qemu cannot run here: ${whyNoQemu}`);
  process.exit(2);
}
// As root the run starts (and crashes) a PostgreSQL of its own; otherwise it uses the shared one.
if (privatePostgresUnavailable() && !process.env.TEST_DATABASE_URL) {
  console.error("chaos needs PostgreSQL: export TEST_DATABASE_URL=$(scripts/postgres.sh start)");
  process.exit(2);
}
const summary = await runChaos({
  jobs: Number(values.jobs),
  seed: Number(values.seed),
  replicas: Number(values.replicas),
  hosts: Number(values.hosts),
  backend: values.backend,
});
process.exit(summary.ok ? 0 : 1);
