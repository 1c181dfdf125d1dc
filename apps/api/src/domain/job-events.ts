import {
  isFinalJobStatus,
  type JobAction,
  type JobEvent,
  type JobOutcome,
  type JobStatus,
  type JobStep,
  type ProtocolJobErrorCode,
  parseJobResult,
} from "@doppio/contracts";

export interface JobState {
  status: JobStatus;
  lastSeq: number;
  steps: JobStep[];
  log: string;
  error: string | null;
  errorCode: string | null;
  result: Record<string, unknown> | null;
  startedAt: Date | null;
  finishedAt: Date | null;
}

const LOG_LIMIT = 64 * 1024;

/**
 * Applies agent events to a job, in sequence order. An event at or below `lastSeq` was
 * applied before and is skipped; a gap stops application so nothing is applied out of
 * order (the agent resends from `lastSeq + 1`); nothing changes a finished job. The result
 * event is read against the contract of the job's `action`: `outcome` is what the job ended
 * with, and a result that breaks the contract ends it failed with `invalid_result`.
 */
export function applyJobEvents(
  action: JobAction,
  job: JobState,
  events: readonly JobEvent[],
): { state: JobState; applied: JobEvent[]; outcome: JobOutcome | null } {
  if (isFinalJobStatus(job.status)) return { state: job, applied: [], outcome: null };
  // Copy only the job's event-driven fields, so callers can persist `state` as is.
  const state: JobState = {
    status: job.status,
    lastSeq: job.lastSeq,
    steps: job.steps.map((s) => ({ ...s })),
    log: job.log,
    error: job.error,
    errorCode: job.errorCode,
    result: job.result,
    startedAt: job.startedAt,
    finishedAt: job.finishedAt,
  };
  const applied: JobEvent[] = [];
  let outcome: JobOutcome | null = null;
  for (const event of [...events].sort((a, b) => a.seq - b.seq)) {
    if (event.seq <= state.lastSeq) continue;
    if (event.seq !== state.lastSeq + 1 || isFinalJobStatus(state.status)) break;
    if (event.type === "result") {
      outcome = readResult(action, event);
      finish(state, outcome, new Date(event.at));
    } else {
      applyOne(state, event);
    }
    state.lastSeq = event.seq;
    applied.push(event);
  }
  return { state, applied, outcome };
}

/** The result as its contract types it; a malformed one fails the job and says why. */
function readResult(action: JobAction, event: Extract<JobEvent, { type: "result" }>): JobOutcome {
  const parsed = parseJobResult(action, event);
  if (parsed.ok) return parsed.outcome;
  const said = !event.ok && event.error ? `; the agent said: ${event.error}` : "";
  return {
    action,
    ok: false,
    code: "invalid_result" satisfies ProtocolJobErrorCode,
    error: `the agent's ${action} result does not match its contract (${parsed.problems.join("; ")})${said}`,
  };
}

function finish(state: JobState, outcome: JobOutcome, at: Date): void {
  state.status = outcome.ok ? "succeeded" : "failed";
  state.error = outcome.ok ? null : outcome.error;
  state.errorCode = outcome.ok ? null : outcome.code;
  state.result = outcome.ok ? outcome.data : null;
  state.startedAt ??= at;
  state.finishedAt = at;
}

function applyOne(state: JobState, event: Exclude<JobEvent, { type: "result" }>): void {
  const at = new Date(event.at);
  switch (event.type) {
    case "started":
      state.status = "running";
      state.startedAt ??= at;
      return;
    case "step": {
      state.status = "running";
      state.startedAt ??= at;
      // A job run again (resumed after an agent restart, or a launch relaunched) runs steps
      // again: the latest run of a step replaces the earlier one where it stood, so each step
      // shows once, in the order the steps first ran.
      const open = state.steps.findLast((s) => s.name === event.name);
      if (event.status === "running" || !open) {
        if (open && open.status === "running" && event.status === "running") return;
        const step: JobStep = {
          name: event.name,
          status: event.status,
          startedAt: event.at,
          finishedAt: event.status === "running" ? null : event.at,
          detail: event.detail ?? null,
        };
        if (open) state.steps[state.steps.indexOf(open)] = step;
        else state.steps.push(step);
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
  }
}
