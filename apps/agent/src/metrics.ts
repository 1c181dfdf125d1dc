import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";

/** One registry per agent instance (tests run several agents in one process). */
export function createMetrics(opts: { defaults?: boolean } = {}) {
  const registry = new Registry();
  if (opts.defaults) collectDefaultMetrics({ register: registry, prefix: "doppio_agent_" });
  return {
    registry,
    jobs: new Counter({
      name: "doppio_agent_jobs_total",
      help: "Jobs the agent finished, by action and outcome (succeeded|failed)",
      labelNames: ["action", "outcome"] as const,
      registers: [registry],
    }),
    stepDuration: new Histogram({
      name: "doppio_agent_step_duration_seconds",
      help: "Duration of job steps by step name and outcome",
      labelNames: ["step", "outcome"] as const,
      buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
      registers: [registry],
    }),
    outboxBacklog: new Gauge({
      name: "doppio_agent_outbox_backlog",
      help: "Job events written to the outbox and not yet confirmed by the control plane",
      registers: [registry],
    }),
    storeFull: new Gauge({
      name: "doppio_agent_store_full",
      help: "1 while the agent's SQLite store cannot record jobs because its disk is full (jobs wait)",
      registers: [registry],
    }),
    jobsHeld: new Gauge({
      name: "doppio_agent_jobs_held",
      help: "Jobs queued or running on this agent",
      registers: [registry],
    }),
    reconcileActions: new Counter({
      name: "doppio_agent_reconcile_actions_total",
      help: "Corrections made by the reconcile loop, by kind",
      labelNames: ["action"] as const,
      registers: [registry],
    }),
    deliveryFailures: new Counter({
      name: "doppio_agent_event_delivery_failures_total",
      help: "Failed attempts to deliver outbox events to the control plane",
      registers: [registry],
    }),
  };
}
export type Metrics = ReturnType<typeof createMetrics>;
