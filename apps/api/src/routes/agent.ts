import {
  ClaimRequest,
  ClaimResponse,
  Heartbeat,
  HeartbeatResponse,
  JobEventsRequest,
  JobEventsResponse,
} from "@doppio/contracts";
import type { FastifyPluginAsyncZod } from "fastify-type-provider-zod";
import { z } from "zod";
import type { Ctx } from "../context.ts";
import { requireAgent } from "../http/auth.ts";
import { applyAgentEvents, longPollClaim } from "../services/jobs.ts";
import { recordHeartbeat } from "../services/servers.ts";

/** The agent protocol: outbound-only from the host, bearer = the server's agent token. */
export function agentRoutes(ctx: Ctx): FastifyPluginAsyncZod {
  const agent = requireAgent(ctx);
  return async (app) => {
    app.post(
      "/jobs/claim",
      {
        onRequest: agent,
        schema: { tags: ["agent"], body: ClaimRequest, response: { 200: ClaimResponse } },
      },
      async (req, reply) => {
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
    );

    app.post(
      "/jobs/:id/events",
      {
        onRequest: agent,
        schema: {
          tags: ["agent"],
          params: z.object({ id: z.string().uuid() }),
          body: JobEventsRequest,
          response: { 200: JobEventsResponse },
        },
      },
      async (req) => applyAgentEvents(ctx, req.agentServer!, req.params.id, req.body.events),
    );

    app.post(
      "/heartbeat",
      {
        onRequest: agent,
        schema: { tags: ["agent"], body: Heartbeat, response: { 200: HeartbeatResponse } },
      },
      async (req) => recordHeartbeat(ctx, req.agentServer!, req.body),
    );
  };
}
