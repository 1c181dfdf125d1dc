import type { JobStep } from "@doppio/contracts";
import { stepLabel } from "../lib/labels.ts";
import { formatDuration } from "../lib/time.ts";

const ICON = { running: "", succeeded: "✓", failed: "✕" } as const;
const SAID = { running: "in progress", succeeded: "done", failed: "failed" } as const;

export function StepRow({ step, now }: { step: JobStep; now: number }) {
  const end = step.finishedAt ? Date.parse(step.finishedAt) : now;
  const ms = end - Date.parse(step.startedAt);
  return (
    <li className={`step step-${step.status}`} data-step={step.name} data-status={step.status}>
      <span className="step-icon" aria-hidden="true">
        {step.status === "running" ? <span className="spinner" /> : ICON[step.status]}
      </span>
      <span className="step-label">
        {stepLabel(step.name)}
        <span className="visually-hidden">, {SAID[step.status]}</span>
        {step.detail && <span className="step-detail">{step.detail}</span>}
      </span>
      <span className="step-time" data-testid="step-time">
        {formatDuration(ms)}
      </span>
    </li>
  );
}
