import { Job, RegisteredServer, RegisterServerRequest, Server } from "@doppio/contracts";
import type { FastifyPluginAsyncZod } from "fastify-type-provider-zod";
import { z } from "zod";
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

const NameParams = z.object({ name: z.string().max(64) });

export function serverRoutes(ctx: Ctx): FastifyPluginAsyncZod {
  const admin = requireAdmin(ctx);
  return async (app) => {
    app.get(
      "/servers",
      {
        onRequest: admin,
        schema: { tags: ["servers"], response: { 200: z.object({ servers: z.array(Server) }) } },
      },
      async () => ({ servers: await listServers(ctx) }),
    );
    app.post(
      "/servers",
      {
        onRequest: admin,
        schema: { tags: ["servers"], body: RegisterServerRequest, response: { 201: RegisteredServer } },
      },
      async (req, reply) => reply.code(201).send(await registerServer(ctx, req.principal!, req.body)),
    );
    app.get(
      "/servers/:name",
      { onRequest: admin, schema: { tags: ["servers"], params: NameParams, response: { 200: Server } } },
      async (req) => getServer(ctx, req.params.name),
    );
    app.post(
      "/servers/:name/token",
      {
        onRequest: admin,
        schema: {
          tags: ["servers"],
          params: NameParams,
          response: { 200: z.object({ agentToken: z.string() }) },
        },
      },
      async (req) => rotateServerToken(ctx, req.principal!, req.params.name),
    );
    for (const [path, action] of [
      ["golden", "build_golden"],
      ["images", "build_image"],
    ] as const) {
      app.post(
        `/servers/:name/${path}`,
        {
          onRequest: admin,
          schema: {
            tags: ["servers"],
            params: NameParams,
            body: z.strictObject({ template: z.string().min(1).max(64) }),
            response: { 202: Job },
          },
        },
        async (req, reply) => {
          const job = await enqueueTemplateJob(
            ctx,
            req.principal!,
            req.params.name,
            action,
            req.body.template,
          );
          return reply.code(202).send(toJob(job, null, req.params.name));
        },
      );
    }
  };
}
