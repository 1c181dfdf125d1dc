import type { FastifyPluginAsyncZod } from "fastify-type-provider-zod";
import type { Ctx } from "../context.ts";
import { requireAdmin } from "../http/auth.ts";
import { toJob } from "../services/jobs.ts";
import {
  enqueueTemplateJob,
  getServer,
  listServers,
  registerServer,
  rotateServerToken,
  serverAction,
} from "../services/servers.ts";
import { setWarmPoolSizes } from "../services/warm-pools.ts";
import { endpoint } from "./contract.ts";

export function serverRoutes(ctx: Ctx): FastifyPluginAsyncZod {
  const admin = requireAdmin(ctx);
  return async (app) => {
    app.route({
      ...endpoint("listServers"),
      onRequest: admin,
      handler: async () => ({ servers: await listServers(ctx) }),
    });
    app.route({
      ...endpoint("registerServer"),
      onRequest: admin,
      handler: async (req, reply) =>
        reply.code(201).send(await registerServer(ctx, req.principal!, req.body)),
    });
    app.route({
      ...endpoint("getServer"),
      onRequest: admin,
      handler: async (req) => getServer(ctx, req.params.name),
    });
    app.route({
      ...endpoint("rotateServerToken"),
      onRequest: admin,
      handler: async (req) => rotateServerToken(ctx, req.principal!, req.params.name),
    });
    app.route({
      ...endpoint("serverAction"),
      onRequest: admin,
      handler: async (req) => serverAction(ctx, req.principal!, req.params.name, req.body.action),
    });
    app.route({
      ...endpoint("setWarmPool"),
      onRequest: admin,
      handler: async (req) => {
        await setWarmPoolSizes(ctx, req.principal!, req.params.name, req.body.sizes);
        return getServer(ctx, req.params.name);
      },
    });
    for (const [contract, action] of [
      ["buildGolden", "build_golden"],
      ["buildImage", "build_image"],
    ] as const) {
      app.route({
        ...endpoint(contract),
        onRequest: admin,
        handler: async (req, reply) => {
          const job = await enqueueTemplateJob(
            ctx,
            req.principal!,
            req.params.name,
            action,
            req.body.template,
          );
          return reply.code(202).send(toJob(job, null, req.params.name));
        },
      });
    }
  };
}
