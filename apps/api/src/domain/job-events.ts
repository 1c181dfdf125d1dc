import type { JobEvent, JobStatus, JobStep } from "@doppio/contracts";

export interface JobState {
  status: JobStatus;
  lastSeq: number;
  steps: JobStep[];
  log: string;
  error: string | null;
  result: Record<string, unknown> | null;
  startedAt: Date | null;
  finishedAt: Date | null;
}

const LOG_LIMIT = 64 * 1024;

export function isFinal(status: JobStatus): boolean {
  return status === "succeeded" || status === "failed";
}

/**
 * Applies agent events to a job, in sequence order. An event at or below `lastSeq` was
 * applied before and is skipped; a gap stops application so nothing is applied out of
 * order (the agent resends from `lastSeq + 1`); nothing changes a finished job.
 */
export function applyJobEvents(
  job: JobState,
  events: readonly JobEvent[],
): { state: JobState; applied: JobEvent[] } {
  if (isFinal(job.status)) return { state: job, applied: [] };
  // Copy only the job's event-driven fields, so callers can persist `state` as is.
  const state: JobState = {
    status: job.status,
    lastSeq: job.lastSeq,
    steps: job.steps.map((s) => ({ ...s })),
    log: job.log,
    error: job.error,
    result: job.result,
    startedAt: job.startedAt,
    finishedAt: job.finishedAt,
  };
  const applied: JobEvent[] = [];
  for (const event of [...events].sort((a, b) => a.seq - b.seq)) {
    if (event.seq <= state.lastSeq) continue;
    if (event.seq !== state.lastSeq + 1 || isFinal(state.status)) break;
    applyOne(state, event);
    state.lastSeq = event.seq;
    applied.push(event);
  }
  return { state, applied };
}

function applyOne(state: JobState, event: JobEvent): void {
  const at = new Date(event.at);
  switch (event.type) {
    case "started":
      state.status = "running";
      state.startedAt ??= at;
      return;
    case "step": {
      state.status = "running";
      state.startedAt ??= at;
      // A retried job may run a step again: the latest run of a step replaces the earlier one.
      const open = state.steps.findLast((s) => s.name === event.name);
      if (event.status === "running" || !open) {
        if (open && open.status === "running" && event.status === "running") return;
        state.steps.push({
          name: event.name,
          status: event.status,
          startedAt: event.at,
          finishedAt: event.status === "running" ? null : event.at,
          detail: event.detail ?? null,
        });
        return;
      }
      open.status = event.status;
      open.finishedAt = event.at;
      if (event.detail !== undefined) open.detail = event.detail;
      return;
    }
    case "log": {
      const next = `${state.log}${event.line}\n`;
      state.log = next.length > LOG_LIMIT ? next.slice(next.length - LOG_LIMIT) : next;
      return;
    }
    case "result":
      state.status = event.ok ? "succeeded" : "failed";
      state.error = event.ok ? null : (event.error ?? "the agent reported a failure without a reason");
      state.result = event.data ?? null;
      state.startedAt ??= at;
      state.finishedAt = at;
      return;
  }
}
