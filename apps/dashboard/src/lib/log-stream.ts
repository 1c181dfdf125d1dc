import { routes, routeUrl } from "@doppio/contracts";
import { useEffect, useState } from "react";
import { parseEvent } from "../api/events.ts";
import { appendLines, EMPTY_LOG, LOG_BACKLOG_LINES, type LogBuffer } from "./box-log.ts";

export type LogStreamState = "connecting" | "live" | "reconnecting";

const MAX_BACKOFF_MS = 15_000;

export interface BoxLog extends LogBuffer {
  state: LogStreamState;
}

/**
 * Follows a box's log stream (`lines` events, each with the last line's seq as its id).
 * EventSource reconnects by itself after a dropped connection and resumes from its
 * Last-Event-ID; after an HTTP error it gives up, so the stream is reopened with backoff,
 * asking for the lines after the last one held.
 */
export function useBoxLog(slug: string): BoxLog {
  const [buffer, setBuffer] = useState<LogBuffer>(EMPTY_LOG);
  const [state, setState] = useState<LogStreamState>("connecting");

  useEffect(() => {
    setBuffer(EMPTY_LOG);
    setState("connecting");
    let source: EventSource | null = null;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let attempt = 0;
    let disposed = false;
    let lastSeq = 0;

    const open = () => {
      const query = lastSeq > 0 ? { after: lastSeq } : { tail: LOG_BACKLOG_LINES };
      source = new EventSource(routeUrl(routes.streamBoxLogs, { params: { slug }, query }));
      source.addEventListener("open", () => {
        attempt = 0;
        setState("live");
      });
      source.addEventListener("lines", (e) => {
        // The `lines` event's payload, checked before it reaches the page.
        const parsed = parseEvent(routes.streamBoxLogs.events.lines, e);
        if (!parsed) return;
        const fresh = parsed.lines.filter((l) => l.seq > lastSeq);
        if (fresh.length === 0) return;
        lastSeq = fresh.at(-1)!.seq;
        setBuffer((prev) => appendLines(prev, fresh));
      });
      source.addEventListener("error", () => {
        if (disposed) return;
        setState("reconnecting");
        if (source?.readyState === EventSource.CLOSED) {
          source.close();
          timer = setTimeout(open, Math.min(MAX_BACKOFF_MS, 1000 * 2 ** attempt++));
        }
      });
    };
    open();
    return () => {
      disposed = true;
      clearTimeout(timer);
      source?.close();
    };
  }, [slug]);

  return { ...buffer, state };
}
