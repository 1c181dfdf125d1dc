import type { RouteEvents, routes } from "@doppio/contracts";
import type { FastifyPluginAsyncZod } from "fastify-type-provider-zod";
import type { Ctx } from "../context.ts";
import { requireUser } from "../http/auth.ts";
import { openSse } from "../http/sse.ts";
import { endpoint } from "./contract.ts";

type TeamEvents = RouteEvents<typeof routes.streamEvents>;

/**
 * Server-sent events of the caller's team: `box` and `job` changes as they happen.
 * SSE rather than WebSocket: one direction is all the dashboard and CLI need, and it
 * reconnects by itself through proxies.
 */
export function eventRoutes(ctx: Ctx): FastifyPluginAsyncZod {
  const user = requireUser(ctx);
  return async (app) => {
    app.route({
      ...endpoint("streamEvents"),
      onRequest: user,
      handler: async (req, reply) => {
        const release = ctx.streamSlots.acquire(req.principal!.userId);
        let unsubscribe = () => {};
        const stream = openSse(ctx, reply, release, () => unsubscribe());
        unsubscribe = ctx.bus.subscribe(req.principal!.teamId, (event) => {
          if (event.type === "box") stream.send("box", event.box satisfies TeamEvents["box"]);
          else if (event.type === "job") stream.send("job", event.job satisfies TeamEvents["job"]);
          else if (event.type === "topup") {
            // A top-up is its payer's business, not their team's.
            if (event.userId === req.principal!.userId)
              stream.send("topup", event.topUp satisfies TeamEvents["topup"]);
          } else stream.send("wallet", event.wallet satisfies TeamEvents["wallet"]);
        });
      },
    });
  };
}
