import type { Job } from "@doppio/contracts";
import { ACTION_TITLES, stepLabel } from "./labels.ts";
import { formatClock, formatDuration } from "./time.ts";

const DIM = "\x1b[2m";
const GREEN = "\x1b[32m";
const RED = "\x1b[31m";
const CYAN = "\x1b[36m";
const RESET = "\x1b[0m";

/** Jobs as terminal lines (oldest job first): steps with durations, then the agent's log; ANSI colours. */
export function jobLogLines(jobs: readonly Job[]): string[] {
  const lines: string[] = [];
  for (const job of [...jobs].reverse()) {
    lines.push(`${DIM}${formatClock(job.createdAt)}${RESET} ${CYAN}== ${ACTION_TITLES[job.action]}${RESET}`);
    for (const s of job.steps) {
      const at = `${DIM}${formatClock(s.startedAt)}${RESET}`;
      if (s.status === "running") {
        lines.push(`${at} … ${stepLabel(s.name)}`);
      } else {
        const ms = Date.parse(s.finishedAt ?? s.startedAt) - Date.parse(s.startedAt);
        const mark = s.status === "succeeded" ? `${GREEN}✓${RESET}` : `${RED}✕${RESET}`;
        lines.push(`${at} ${mark} ${stepLabel(s.name)} ${DIM}(${formatDuration(ms)})${RESET}`);
      }
      if (s.detail) lines.push(`         ${s.status === "failed" ? RED : DIM}${s.detail}${RESET}`);
    }
    // The agent's own log lines for the job (the last 64 KiB), after its step summary.
    for (const line of job.log.split("\n")) {
      if (line !== "") lines.push(`${DIM}│${RESET} ${line}`);
    }
    if (job.status === "succeeded") lines.push(`${GREEN}   finished${RESET}`);
    if (job.status === "failed") lines.push(`${RED}   failed: ${job.error ?? "no reason given"}${RESET}`);
  }
  return lines;
}
