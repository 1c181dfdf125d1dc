import type { FastifyPluginAsync } from "fastify";
import type { Ctx } from "../context.ts";
import { requireUser } from "../http/auth.ts";
import { openSse } from "../http/sse.ts";

/**
 * Server-sent events of the caller's team: `box` and `job` changes as they happen.
 * SSE rather than WebSocket: one direction is all the dashboard and CLI need, and it
 * reconnects by itself through proxies.
 */
export function eventRoutes(ctx: Ctx): FastifyPluginAsync {
  const user = requireUser(ctx);
  return async (app) => {
    app.get(
      "/events",
      { onRequest: user, schema: { tags: ["realtime"], hide: true } },
      async (req, reply) => {
        const release = ctx.streamSlots.acquire(req.principal!.userId);
        let unsubscribe = () => {};
        const stream = openSse(ctx, reply, release, () => unsubscribe());
        unsubscribe = ctx.bus.subscribe(req.principal!.teamId, (event) => {
          stream.send(event.type, event.type === "box" ? event.box : event.job);
        });
      },
    );
  };
}
