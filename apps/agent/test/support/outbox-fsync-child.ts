/**
 * Run under `strace` by store-durability.test.ts: a real agent store and deliverer, with a
 * marker written to stdout before each phase so the trace can be cut into phases.
 * Usage: outbox-fsync-child.ts <data dir>
 */
import { writeSync } from "node:fs";
import type { JobEvent } from "@doppio/contracts";
import { pino } from "pino";
import { systemClock } from "../../src/clock.ts";
import type { ControlPlane } from "../../src/control-plane.ts";
import { Deliverer } from "../../src/loops/deliverer.ts";
import { createMetrics } from "../../src/metrics.ts";
import { openStore } from "../../src/store/db.ts";
import { JobStore } from "../../src/store/jobs.ts";

const mark = (phase: string) => writeSync(1, `MARK ${phase}\n`);
const at = () => new Date().toISOString();
const store = new JobStore(openStore(process.argv[2]!));
store.insert({ id: "job-1", action: "create", box: "b", payload: null, receivedAt: at() });

mark("append");
for (let i = 0; i < 20; i++) store.append("job-1", { type: "log", at: at(), line: `line ${i}` });

mark("deliver");
const cp: ControlPlane = {
  claim: async () => ({ jobs: [], rejected: [] }),
  heartbeat: async () => {
    throw new Error("not used");
  },
  async sendEvents(_jobId: string, events: JobEvent[]) {
    mark("send");
    return { applied: events.length, lastSeq: events.at(-1)!.seq };
  },
};
const deliverer = new Deliverer({
  store,
  cp,
  clock: systemClock,
  log: pino({ level: "silent" }),
  metrics: createMetrics({ defaults: false }),
});
await deliverer.deliverOnce();

mark("finish");
store.finish("job-1", { ok: true, data: { ip: "10.0.0.2" } }, at());
mark("end");
