import type { Job } from "@doppio/contracts";
import { lazy, Suspense, useMemo } from "react";
import { jobLogLines } from "../lib/job-log.ts";
import { useLogStream } from "../lib/log-stream.ts";
import { Loading } from "./Loading.tsx";

// xterm.js is the largest dependency: load it only on the box page.
const Terminal = lazy(() => import("./Terminal.tsx").then((m) => ({ default: m.Terminal })));

interface Props {
  jobs: readonly Job[];
  /**
   * Server-sent events URL of the box's guest log, once the platform offers one; each
   * `message` event's data is one line. Without it the panel shows the jobs' steps.
   */
  streamUrl?: string;
}

export function LogsPanel({ jobs, streamUrl }: Props) {
  const stream = useLogStream(streamUrl);
  const lines = useMemo(() => [...jobLogLines(jobs.slice(0, 5)), ...stream], [jobs, stream]);
  return (
    <section className="card" aria-labelledby="logs-title">
      <div className="card-head">
        <h2 id="logs-title">Logs</h2>
        <span className="muted">{streamUrl ? "Live box log" : "Recent jobs, live"}</span>
      </div>
      <Suspense fallback={<Loading label="Loading terminal…" />}>
        <Terminal lines={lines} label="Box logs" />
      </Suspense>
    </section>
  );
}
