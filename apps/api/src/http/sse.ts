import type { FastifyReply } from "fastify";
import type { Ctx } from "../context.ts";

export interface SseStream {
  send(event: string, data: unknown, id?: number | string): void;
  end(): void;
}

/**
 * Takes over the response as a server-sent event stream for `userId`, who holds one of
 * their stream slots until it closes (the caller has acquired it; `release` gives it back).
 * A keepalive comment goes out every 15 s (proxies close idle connections).
 *
 * Backpressure: a reader that stops reading (or reads slower than events arrive) would make
 * Node buffer every event for it without bound. Once more than `streamBufferBytes` wait in
 * the response's buffer the stream is closed instead; EventSource reconnects by itself and
 * the log stream resumes from its Last-Event-ID, so a slow reader loses only time.
 * `onClose` runs once when the stream ends for any reason.
 */
export function openSse(ctx: Ctx, reply: FastifyReply, release: () => void, onClose: () => void): SseStream {
  reply.hijack();
  const res = reply.raw;
  res.writeHead(200, {
    "content-type": "text/event-stream; charset=utf-8",
    "cache-control": "no-cache, no-transform",
    connection: "keep-alive",
    "x-accel-buffering": "no",
  });
  ctx.metrics.sseStreams.inc();
  const write = (frame: string) => {
    if (res.destroyed) return;
    res.write(frame);
    if (res.writableLength > ctx.config.streamBufferBytes) {
      ctx.metrics.sseDropped.inc();
      ctx.log.warn({ buffered: res.writableLength }, "closing a stream whose reader fell behind");
      res.destroy();
    }
  };
  write(": connected\n\n");
  const keepalive = setInterval(() => write(": keepalive\n\n"), 15_000);
  res.on("close", () => {
    clearInterval(keepalive);
    ctx.metrics.sseStreams.dec();
    release();
    onClose();
  });
  return {
    send: (event, data, id) =>
      write(`${id !== undefined ? `id: ${id}\n` : ""}event: ${event}\ndata: ${JSON.stringify(data)}\n\n`),
    end: () => res.end(),
  };
}
