import type { Box, BoxStatus, LogLine } from "@doppio/contracts";
import type { DoppioClient } from "./client.ts";
import { DoppioError, isTransient } from "./errors.ts";

const RECONNECT_MIN_MS = 500;
const RECONNECT_MAX_MS = 10_000;

export interface FollowLogsOptions {
  /** Only lines after this seq (0: from the start of what the control plane keeps). */
  after?: number;
  /** Without `after`: the newest `tail` lines first. */
  tail?: number;
  /** One source only: `console`, or a guest service's name. */
  source?: string;
  signal?: AbortSignal;
  /** The stream is open (again). */
  onOpen?: () => void;
  /**
   * The stream dropped (`cause` null: the server ended it) or could not be opened; it is
   * retried after `delayMs`, resuming after line `after`.
   */
  onLost?: (cause: unknown, delayMs: number, after: number) => void;
}

/**
 * Follows a box's guest log: yields each batch of new lines as the control plane streams
 * them. A dropped stream, or a control plane that cannot be reached or fails, is retried
 * with a growing pause (0.5 s to 10 s), resuming after the last line seen, so no line is
 * lost or repeated; a refusal (box gone, signed out) ends it by throwing. Runs until
 * `signal` aborts.
 */
export async function* followLogs(
  client: DoppioClient,
  slug: string,
  opts: FollowLogsOptions = {},
): AsyncGenerator<LogLine[]> {
  let after = opts.after;
  let delay = RECONNECT_MIN_MS;
  const signal = opts.signal;
  const onOpen = () => {
    delay = RECONNECT_MIN_MS;
    opts.onOpen?.();
  };
  while (!signal?.aborted) {
    const query = {
      ...(after === undefined ? { tail: opts.tail } : { after }),
      ...(opts.source ? { source: opts.source } : {}),
    };
    let cause: unknown = null;
    try {
      for await (const ev of client.stream(
        "streamBoxLogs",
        { params: { slug }, query },
        { signal, onOpen },
      )) {
        const fresh = ev.data.lines.filter((l) => l.seq > (after ?? 0));
        if (fresh.length === 0) continue;
        after = fresh.at(-1)!.seq;
        yield fresh;
      }
    } catch (err) {
      if (signal?.aborted) return;
      if (!isTransient(err)) throw err;
      cause = err;
    }
    if (signal?.aborted) return;
    after ??= 0;
    opts.onLost?.(cause, delay, after);
    await sleep(delay, signal);
    delay = Math.min(RECONNECT_MAX_MS, delay * 2);
  }
}

/** The box reached a state it cannot leave toward the one waited for. */
export class BoxFailedError extends DoppioError {
  override name = "BoxFailedError";
  constructor(readonly box: Box) {
    super(`box ${box.slug} is ${box.status}${box.statusReason ? `: ${box.statusReason}` : ""}`);
  }
}

export interface WaitForBoxOptions {
  /** Default `running`. */
  status?: BoxStatus;
  signal?: AbortSignal;
  /** How often to look when the event stream says nothing (default 2 s). */
  pollMs?: number;
}

/**
 * Waits until the box has `status` (default `running`) and returns it. Listens to the
 * team's event stream and also polls, so a proxy that holds the stream back only makes it
 * slower. A box in `error` (or deleted while waiting for anything else) throws
 * `BoxFailedError` with its reason.
 */
export async function waitForBox(
  client: DoppioClient,
  slug: string,
  opts: WaitForBoxOptions = {},
): Promise<Box> {
  const want = opts.status ?? "running";
  const stop = new AbortController();
  const signal = opts.signal ? AbortSignal.any([opts.signal, stop.signal]) : stop.signal;
  return new Promise<Box>((resolve, reject) => {
    let settled = false;
    const settle = (fn: () => void) => {
      if (settled) return;
      settled = true;
      stop.abort();
      fn();
    };
    const look = (box: Box) => {
      if (box.slug !== slug) return;
      if (box.status === want) settle(() => resolve(box));
      else if (box.status === "error" || box.status === "deleted")
        settle(() => reject(new BoxFailedError(box)));
    };
    const fail = (err: unknown) => settle(() => reject(err));
    opts.signal?.addEventListener("abort", () => fail(opts.signal!.reason), { once: true });

    const listen = async () => {
      while (!signal.aborted) {
        try {
          for await (const ev of client.stream("streamEvents", {}, { signal })) {
            if (ev.event === "box") look(ev.data);
          }
        } catch {
          // Refused or dropped: polling carries on; listen again after a pause.
        }
        await sleep(opts.pollMs ?? 2000, signal);
      }
    };
    const poll = async () => {
      while (!signal.aborted) {
        try {
          look(await client.box(slug, { signal }));
        } catch (err) {
          if (!signal.aborted && !isTransient(err)) fail(err);
        }
        await sleep(opts.pollMs ?? 2000, signal);
      }
    };
    void listen();
    void poll();
  });
}

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}
