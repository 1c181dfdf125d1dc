import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";

export function createMetrics() {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  return {
    registry,
    httpDuration: new Histogram({
      name: "doppio_http_request_duration_seconds",
      help: "HTTP request duration by route and status",
      labelNames: ["method", "route", "status"] as const,
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10, 30],
      registers: [registry],
    }),
    jobsEnqueued: new Counter({
      name: "doppio_jobs_enqueued_total",
      help: "Agent jobs enqueued by action",
      labelNames: ["action"] as const,
      registers: [registry],
    }),
    jobsFinished: new Counter({
      name: "doppio_jobs_finished_total",
      help: "Agent jobs finished by action and status",
      labelNames: ["action", "status"] as const,
      registers: [registry],
    }),
    claimWaiters: new Gauge({
      name: "doppio_claim_waiters",
      help: "Agent claim long-polls currently held open",
      registers: [registry],
    }),
    claimsSuperseded: new Counter({
      name: "doppio_claims_superseded_total",
      help: "Agent claim long-polls ended early because a newer poll of the same server arrived",
      registers: [registry],
    }),
    agentRequestsRefused: new Counter({
      name: "doppio_agent_requests_refused_total",
      help: "Agent requests refused because their host already had AGENT_MAX_IN_FLIGHT in progress on this replica",
      labelNames: ["server"] as const,
      registers: [registry],
    }),
    sseStreams: new Gauge({
      name: "doppio_sse_streams",
      help: "Event and log streams currently open",
      registers: [registry],
    }),
    sseDropped: new Counter({
      name: "doppio_sse_dropped_total",
      help: "Streams closed because their reader fell too far behind",
      registers: [registry],
    }),
    jobsReaped: new Counter({
      name: "doppio_jobs_reaped_total",
      help: "Jobs whose lease expired, by outcome",
      labelNames: ["outcome"] as const,
      registers: [registry],
    }),
  };
}
export type Metrics = ReturnType<typeof createMetrics>;
