import type { Job } from "@doppio/contracts";
import { ACTION_TITLES } from "../lib/labels.ts";
import { formatDuration, useNow } from "../lib/time.ts";
import { StepRow } from "./StepRow.tsx";

const JOB_STATE: Record<Job["status"], string> = {
  pending: "waiting for a server",
  delivered: "picked up by the server",
  running: "in progress",
  succeeded: "done",
  failed: "failed",
};

/** The "watch it come up" list: each step with its time, the running one counting up live. */
export function JobSteps({ job }: { job: Job }) {
  const finished = job.status === "succeeded" || job.status === "failed";
  const now = useNow(!finished);
  const start = job.startedAt ?? job.createdAt;
  const total = (job.finishedAt ? Date.parse(job.finishedAt) : now) - Date.parse(start);
  return (
    <section className="card job" aria-labelledby="job-title" data-job-status={job.status}>
      <div className="card-head">
        <h2 id="job-title">
          {ACTION_TITLES[job.action]}{" "}
          <span className={`job-state job-${job.status}`}>{JOB_STATE[job.status]}</span>
        </h2>
        <span className="muted" title="Total time">
          {formatDuration(total)}
        </span>
      </div>
      {job.steps.length === 0 && !finished && (
        <p className="muted">
          {job.status === "pending" ? "Queued. A server will pick this up shortly…" : "Starting…"}
        </p>
      )}
      {job.steps.length > 0 && (
        <ol className="steps" aria-live="polite">
          {job.steps.map((s) => (
            <StepRow key={`${s.name}-${s.startedAt}`} step={s} now={now} />
          ))}
        </ol>
      )}
      {job.error && (
        <div className="notice notice-error" role="alert">
          <p>
            <strong>This did not finish:</strong> {job.error}{" "}
            {job.errorCode && <code className="error-code">{job.errorCode}</code>}
          </p>
        </div>
      )}
    </section>
  );
}
