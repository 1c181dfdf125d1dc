import type { ServerResponse } from "node:http";
import type { FastifyReply } from "fastify";

/**
 * Takes over the response as a server-sent event stream with a keepalive comment every
 * 15 s (proxies close idle connections); `onClose` runs once when the client goes away.
 */
export function openSse(reply: FastifyReply, onClose: () => void): ServerResponse {
  reply.hijack();
  const res = reply.raw;
  res.writeHead(200, {
    "content-type": "text/event-stream; charset=utf-8",
    "cache-control": "no-cache, no-transform",
    connection: "keep-alive",
    "x-accel-buffering": "no",
  });
  res.write(": connected\n\n");
  const keepalive = setInterval(() => res.write(": keepalive\n\n"), 15_000);
  res.on("close", () => {
    clearInterval(keepalive);
    onClose();
  });
  return res;
}

export function sseEvent(res: ServerResponse, event: string, data: unknown, id?: number | string): void {
  res.write(`${id !== undefined ? `id: ${id}\n` : ""}event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
}
