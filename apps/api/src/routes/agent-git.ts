import type { FastifyPluginAsyncZod } from "fastify-type-provider-zod";
import type { Ctx } from "../context.ts";
import { requireAgent } from "../http/auth.ts";
import { issueGitCredential } from "../services/git-credentials.ts";
import { endpoint } from "./contract.ts";

/**
 * Git credentials for boxes, asked by the agent's metadata service on a box's behalf. A
 * server gets credentials only for its own boxes; anything else is 404.
 */
export function agentGitRoutes(ctx: Ctx): FastifyPluginAsyncZod {
  const agent = requireAgent(ctx);
  return async (app) => {
    app.route({
      ...endpoint("issueGitCredential"),
      onRequest: agent,
      handler: async (req, reply) => {
        reply.header("cache-control", "no-store");
        return issueGitCredential(ctx, req.agentServer!.id, req.params.slug);
      },
    });
  };
}
