import type { FastifyPluginAsync } from "fastify";
import type { Ctx } from "../context.ts";
import { requireUser } from "../http/auth.ts";

/**
 * Server-sent events of the caller's team: `box` and `job` changes as they happen.
 * SSE rather than WebSocket: one direction is all the dashboard and CLI need, and it
 * reconnects by itself through proxies.
 */
export function eventRoutes(ctx: Ctx): FastifyPluginAsync {
  const user = requireUser(ctx);
  return async (app) => {
    app.get("/events", { onRequest: user, schema: { tags: ["realtime"], hide: true } }, (req, reply) => {
      reply.hijack();
      const res = reply.raw;
      res.writeHead(200, {
        "content-type": "text/event-stream; charset=utf-8",
        "cache-control": "no-cache, no-transform",
        connection: "keep-alive",
        "x-accel-buffering": "no",
      });
      res.write(": connected\n\n");
      const unsubscribe = ctx.bus.subscribe(req.principal!.teamId, (event) => {
        res.write(
          `event: ${event.type}\ndata: ${JSON.stringify(event.type === "box" ? event.box : event.job)}\n\n`,
        );
      });
      const keepalive = setInterval(() => res.write(": keepalive\n\n"), 15_000);
      const close = () => {
        clearInterval(keepalive);
        unsubscribe();
      };
      res.on("close", close);
    });
  };
}
