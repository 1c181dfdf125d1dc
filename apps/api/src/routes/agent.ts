import type { FastifyPluginAsyncZod } from "fastify-type-provider-zod";
import type { Ctx } from "../context.ts";
import { requireAgent } from "../http/auth.ts";
import { applyAgentEvents, longPollClaim } from "../services/jobs.ts";
import { recordHeartbeat } from "../services/servers.ts";
import { endpoint } from "./contract.ts";

/** The agent protocol: outbound-only from the host, bearer = the server's agent token. */
export function agentRoutes(ctx: Ctx): FastifyPluginAsyncZod {
  const agent = requireAgent(ctx);
  const claimingAgent = requireAgent(ctx, "claim");
  return async (app) => {
    app.route({
      ...endpoint("claimJobs"),
      onRequest: claimingAgent,
      handler: async (req, reply) => {
        // Stop waiting (and claim nothing more) the moment the agent hangs up.
        const abort = new AbortController();
        // (IncomingMessage "close" fires once the body is read; the response's fires on hang-up.)
        reply.raw.on("close", () => abort.abort());
        const jobs = await longPollClaim(
          ctx,
          req.agentServer!.id,
          req.body.max,
          req.body.waitMs,
          abort.signal,
        );
        return { jobs };
      },
    });

    app.route({
      ...endpoint("reportJobEvents"),
      onRequest: agent,
      handler: async (req) => applyAgentEvents(ctx, req.agentServer!, req.params.id, req.body.events),
    });

    app.route({
      ...endpoint("heartbeat"),
      onRequest: agent,
      handler: async (req) => recordHeartbeat(ctx, req.agentServer!, req.body),
    });
  };
}
