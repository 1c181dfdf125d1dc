import type { FastifyPluginAsyncZod } from "fastify-type-provider-zod";
import type { Ctx } from "../context.ts";
import { notFound } from "../errors.ts";
import { requireAgent, requireUser } from "../http/auth.ts";
import { loadBoxView, toBox } from "../services/box-view.ts";
import { keepAwake, setBoxIdle, setIdleDefault, wakeBox } from "../services/idle.ts";
import { endpoint } from "./contract.ts";

/**
 * Idle hibernation settings and wake-on-request: a box's timeout and wake policy, its
 * owner's default, "keep awake", and the agent's wake call (services/idle.ts).
 */
export function idleRoutes(ctx: Ctx): FastifyPluginAsyncZod {
  const user = requireUser(ctx);
  const agent = requireAgent(ctx);
  return async (app) => {
    const view = async (boxId: string) => {
      const row = await loadBoxView(ctx, boxId);
      if (!row) throw notFound("box");
      return toBox(row.box, row.server, row.ownerIdle);
    };

    app.route({
      ...endpoint("setBoxIdle"),
      onRequest: user,
      handler: async (req) => {
        return view((await setBoxIdle(ctx, req.principal!, req.params.slug, req.body)).id);
      },
    });

    app.route({
      ...endpoint("keepBoxAwake"),
      onRequest: user,
      handler: async (req) => view((await keepAwake(ctx, req.principal!, req.params.slug)).id),
    });

    app.route({
      ...endpoint("setIdleDefault"),
      onRequest: user,
      handler: async (req) => {
        await setIdleDefault(ctx, req.principal!, req.body.idleTimeoutMinutes);
        return { idleTimeoutMinutes: req.body.idleTimeoutMinutes };
      },
    });

    app.route({
      ...endpoint("wakeBox"),
      onRequest: agent,
      handler: async (req, reply) =>
        reply.code(202).send(await wakeBox(ctx, req.agentServer!.id, req.params.slug)),
    });
  };
}
