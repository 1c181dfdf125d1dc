import { routes } from "@doppio/contracts";
import type { ApiClient } from "./api.ts";

export interface ServerEvent {
  event: string;
  data: string;
  /** The event's `id:` field, when it had one. */
  id?: string;
}

/**
 * Opens the team's event stream (`GET /api/v1/events`) and yields its events until the
 * stream ends or `signal` aborts. Comments (keepalives) are skipped.
 */
export function streamEvents(api: ApiClient, signal: AbortSignal): AsyncGenerator<ServerEvent> {
  return streamSse(api, routes.streamEvents.path, signal);
}

/**
 * Opens any server-sent event stream of the API (`path` from the route contract) and yields its
 * events until the stream ends or `signal` aborts. `onOpen` runs once the server has
 * accepted the request (errors before that throw, as from any API call).
 */
export async function* streamSse(
  api: ApiClient,
  path: string,
  signal: AbortSignal,
  onOpen?: () => void,
): AsyncGenerator<ServerEvent> {
  const res = await api.raw("GET", path, {
    headers: { accept: "text/event-stream" },
    signal,
    stream: true,
  });
  onOpen?.();
  if (!res.body) return;
  const decoder = new TextDecoder();
  let buffer = "";
  let event = "message";
  let data: string[] = [];
  let id: string | undefined;
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
          if (data.length > 0) yield { event, data: data.join("\n"), ...(id === undefined ? {} : { id }) };
          event = "message";
          data = [];
          id = undefined;
        } else if (!line.startsWith(":")) {
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
          if (field === "event") event = value;
          else if (field === "data") data.push(value);
          else if (field === "id") id = value;
        }
        nl = buffer.search(/\r?\n/);
      }
    }
  } finally {
    signal.removeEventListener("abort", onAbort);
    reader.cancel().catch(() => {});
  }
}
