import type { ApiClient } from "./api.ts";

export interface ServerEvent {
  event: string;
  data: string;
}

/**
 * Opens the team's event stream (`GET /api/v1/events`) and yields its events until the
 * stream ends or `signal` aborts. Comments (keepalives) are skipped.
 */
export async function* streamEvents(api: ApiClient, signal: AbortSignal): AsyncGenerator<ServerEvent> {
  const res = await api.raw("GET", "/events", {
    headers: { accept: "text/event-stream" },
    signal,
    stream: true,
  });
  if (!res.body) return;
  const decoder = new TextDecoder();
  let buffer = "";
  let event = "message";
  let data: string[] = [];
  const reader = res.body.getReader();
  const onAbort = () => reader.cancel().catch(() => {});
  signal.addEventListener("abort", onAbort, { once: true });
  try {
    while (true) {
      const { done, value } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let nl = buffer.search(/\r?\n/);
      while (nl >= 0) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(buffer[nl] === "\r" ? nl + 2 : nl + 1);
        if (line === "") {
          if (data.length > 0) yield { event, data: data.join("\n") };
          event = "message";
          data = [];
        } else if (!line.startsWith(":")) {
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
          if (field === "event") event = value;
          else if (field === "data") data.push(value);
        }
        nl = buffer.search(/\r?\n/);
      }
    }
  } finally {
    signal.removeEventListener("abort", onAbort);
    reader.cancel().catch(() => {});
  }
}
