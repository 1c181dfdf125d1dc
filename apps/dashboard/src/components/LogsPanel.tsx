import type { Job } from "@doppio/contracts";
import { type KeyboardEvent, lazy, Suspense, useId, useMemo, useRef, useState } from "react";
import { formatLogLine, sourceWidth } from "../lib/box-log.ts";
import { jobLogLines } from "../lib/job-log.ts";
import { type LogStreamState, useBoxLog } from "../lib/log-stream.ts";
import { Loading } from "./Loading.tsx";

// xterm.js is the largest dependency: load it only on the box page.
const Terminal = lazy(() => import("./Terminal.tsx").then((m) => ({ default: m.Terminal })));

type Tab = "box" | "jobs";
const TABS: { id: Tab; label: string }[] = [
  { id: "box", label: "Box log" },
  { id: "jobs", label: "Jobs" },
];

// Worded apart from the page's own "Live" indicator, which is about status updates.
const STATE_TEXT: Record<LogStreamState, string> = {
  connecting: "Connecting to the log…",
  live: "Streaming",
  reconnecting: "Reconnecting to the log…",
};

interface Props {
  slug: string;
  jobs: readonly Job[];
}

/** The box's live guest log (console and services), and the recent jobs' steps on a second tab. */
export function LogsPanel({ slug, jobs }: Props) {
  const log = useBoxLog(slug);
  const [tab, setTab] = useState<Tab>("box");
  const [source, setSource] = useState("");
  const ids = useId();
  const tabRefs = useRef(new Map<Tab, HTMLButtonElement>());

  const width = source ? source.length : sourceWidth(log.sources);
  const boxRows = useMemo(
    () =>
      log.lines
        .filter((l) => !source || l.source === source)
        .map((l) => ({ seq: l.seq, text: formatLogLine(l, width) })),
    [log.lines, source, width],
  );
  const jobRows = useMemo(
    () => jobLogLines(jobs.slice(0, 5)).map((text, i) => ({ seq: i + 1, text })),
    [jobs],
  );
  const sources = source && !log.sources.includes(source) ? [...log.sources, source] : log.sources;

  // Arrow keys move between tabs (one tab stop for the group), as the ARIA tabs pattern has it.
  const onTabKey = (e: KeyboardEvent) => {
    const i = TABS.findIndex((t) => t.id === tab);
    const next =
      e.key === "ArrowRight"
        ? TABS[(i + 1) % TABS.length]
        : e.key === "ArrowLeft"
          ? TABS[(i - 1 + TABS.length) % TABS.length]
          : e.key === "Home"
            ? TABS[0]
            : e.key === "End"
              ? TABS.at(-1)
              : undefined;
    if (!next) return;
    e.preventDefault();
    setTab(next.id);
    tabRefs.current.get(next.id)?.focus();
  };

  return (
    <section className="card logs" aria-labelledby="logs-title">
      <div className="card-head">
        <h2 id="logs-title">Logs</h2>
        <span className={`live live-${log.state}`} role="status" data-log-state={log.state}>
          <span className="badge-dot" aria-hidden="true" />
          {STATE_TEXT[log.state]}
        </span>
      </div>
      <div className="logs-bar">
        <div className="tabs" role="tablist" aria-label="Log to show">
          {TABS.map((t) => (
            <button
              key={t.id}
              ref={(el) => {
                if (el) tabRefs.current.set(t.id, el);
                else tabRefs.current.delete(t.id);
              }}
              type="button"
              role="tab"
              id={`${ids}-tab-${t.id}`}
              aria-selected={tab === t.id}
              aria-controls={`${ids}-panel`}
              tabIndex={tab === t.id ? 0 : -1}
              className="tab"
              onClick={() => setTab(t.id)}
              onKeyDown={onTabKey}
            >
              {t.label}
            </button>
          ))}
        </div>
        {tab === "box" && (
          <label className="logs-source">
            <span>Source</span>
            <select value={source} onChange={(e) => setSource(e.target.value)}>
              <option value="">All</option>
              {sources.map((s) => (
                <option key={s} value={s}>
                  {s}
                </option>
              ))}
            </select>
          </label>
        )}
      </div>
      <div id={`${ids}-panel`} role="tabpanel" aria-labelledby={`${ids}-tab-${tab}`}>
        {tab === "box" ? (
          boxRows.length === 0 ? (
            <p className="log-empty" data-testid="log-empty">
              {log.state === "connecting" && log.lines.length === 0
                ? "Connecting to the box log…"
                : source
                  ? `No lines from ${source} yet.`
                  : "No log lines yet. The box's console and its services (bench, code-server) show up here as they write."}
            </p>
          ) : (
            <Suspense fallback={<Loading label="Loading terminal…" />}>
              <Terminal rows={boxRows} resetKey={`${source}|${width}`} label={`Log of ${slug}`} />
            </Suspense>
          )
        ) : jobRows.length === 0 ? (
          <p className="log-empty">No jobs yet.</p>
        ) : (
          <Suspense fallback={<Loading label="Loading terminal…" />}>
            <Terminal rows={jobRows} resetKey={jobRows} label={`Jobs of ${slug}`} />
          </Suspense>
        )}
      </div>
    </section>
  );
}
