import type { FastifyPluginAsync } from "fastify";
import type { Ctx } from "../context.ts";
import { requireUser } from "../http/auth.ts";
import { openSse, sseEvent } from "../http/sse.ts";

/**
 * Server-sent events of the caller's team: `box` and `job` changes as they happen.
 * SSE rather than WebSocket: one direction is all the dashboard and CLI need, and it
 * reconnects by itself through proxies.
 */
export function eventRoutes(ctx: Ctx): FastifyPluginAsync {
  const user = requireUser(ctx);
  return async (app) => {
    app.get("/events", { onRequest: user, schema: { tags: ["realtime"], hide: true } }, (req, reply) => {
      let unsubscribe = () => {};
      const res = openSse(reply, () => unsubscribe());
      unsubscribe = ctx.bus.subscribe(req.principal!.teamId, (event) => {
        sseEvent(res, event.type, event.type === "box" ? event.box : event.job);
      });
    });
  };
}
