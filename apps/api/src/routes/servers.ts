import { routes } from "@doppio/contracts";
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
} from "../services/servers.ts";
import { endpoint } from "./contract.ts";

const doc = { tags: ["servers"] };

export function serverRoutes(ctx: Ctx): FastifyPluginAsyncZod {
  const admin = requireAdmin(ctx);
  return async (app) => {
    app.route({
      ...endpoint(routes.listServers, doc),
      onRequest: admin,
      handler: async () => ({ servers: await listServers(ctx) }),
    });
    app.route({
      ...endpoint(routes.registerServer, doc),
      onRequest: admin,
      handler: async (req, reply) =>
        reply.code(201).send(await registerServer(ctx, req.principal!, req.body)),
    });
    app.route({
      ...endpoint(routes.getServer, doc),
      onRequest: admin,
      handler: async (req) => getServer(ctx, req.params.name),
    });
    app.route({
      ...endpoint(routes.rotateServerToken, doc),
      onRequest: admin,
      handler: async (req) => rotateServerToken(ctx, req.principal!, req.params.name),
    });
    for (const [contract, action] of [
      [routes.buildGolden, "build_golden"],
      [routes.buildImage, "build_image"],
    ] as const) {
      app.route({
        ...endpoint(contract, doc),
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
