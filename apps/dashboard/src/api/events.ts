import { routes } from "@doppio/contracts";
import { useQueryClient } from "@tanstack/react-query";
import { useEffect, useState } from "react";
import { putBox, putJob } from "./cache.ts";
import { keys } from "./keys.ts";

export type LiveState = "connecting" | "live" | "reconnecting";

const MAX_BACKOFF_MS = 15_000;
const events = routes.streamEvents.events;

/** An event's JSON `data` checked against its schema, or null. */
export function parseEvent<T>(
  schema: { safeParse(data: unknown): { success: true; data: T } | { success: false } },
  e: Event,
): T | null {
  try {
    const parsed = schema.safeParse(JSON.parse((e as MessageEvent<string>).data));
    return parsed.success ? parsed.data : null;
  } catch {
    return null;
  }
}

/**
 * Keeps the query cache current from the team's server-sent events. EventSource retries
 * by itself after a dropped connection, but gives up for good on an HTTP error (a restart
 * of the control plane answering 502, say), so a closed source is reopened with backoff.
 * Every (re)connect refetches, because events sent while disconnected are not replayed.
 */
export function useLiveEvents(enabled: boolean): LiveState {
  const qc = useQueryClient();
  const [state, setState] = useState<LiveState>("connecting");

  useEffect(() => {
    if (!enabled) return;
    let source: EventSource | null = null;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let attempt = 0;
    let disposed = false;

    const open = () => {
      source = new EventSource(routes.streamEvents.path);
      source.addEventListener("open", () => {
        attempt = 0;
        setState("live");
        void qc.invalidateQueries({ queryKey: keys.boxes });
        void qc.invalidateQueries({ queryKey: ["box"] });
        void qc.invalidateQueries({ queryKey: ["jobs"] });
        void qc.invalidateQueries({ queryKey: keys.wallet });
        void qc.invalidateQueries({ queryKey: keys.topUps });
      });
      // Each event is parsed with the contract's schema; one that does not fit is dropped
      // (the next refetch brings the truth).
      source.addEventListener("box", (e) => {
        const box = parseEvent(events.box, e);
        if (box) putBox(qc, box);
        // A box's state sets what it costs per hour now.
        if (box) void qc.invalidateQueries({ queryKey: keys.wallet });
      });
      source.addEventListener("job", (e) => {
        const job = parseEvent(events.job, e);
        if (job) putJob(qc, job);
      });
      // The balance crossed the warning threshold or reached zero: the banner reads the wallet.
      source.addEventListener("wallet", (e) => {
        if (parseEvent(events.wallet, e)) {
          void qc.invalidateQueries({ queryKey: keys.wallet });
          void qc.invalidateQueries({ queryKey: ["ledger"] });
        }
      });
      // One of the user's top-ups changed status (paid, failed, expired, refunded).
      source.addEventListener("topup", (e) => {
        if (parseEvent(events.topup, e)) {
          void qc.invalidateQueries({ queryKey: keys.topUps });
          void qc.invalidateQueries({ queryKey: keys.wallet });
          void qc.invalidateQueries({ queryKey: ["ledger"] });
        }
      });
      source.addEventListener("error", () => {
        if (disposed) return;
        setState("reconnecting");
        if (source?.readyState === EventSource.CLOSED) {
          source.close();
          const delay = Math.min(MAX_BACKOFF_MS, 1000 * 2 ** attempt++);
          timer = setTimeout(open, delay);
          // A 401 here means the session ended: let the app notice and show the login page.
          void qc.invalidateQueries({ queryKey: keys.me });
        }
      });
    };
    open();
    return () => {
      disposed = true;
      clearTimeout(timer);
      source?.close();
    };
  }, [enabled, qc]);

  return state;
}
