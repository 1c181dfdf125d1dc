import { timingSafeEqual } from "node:crypto";
import type { FastifyReply, FastifyRequest } from "fastify";
import { sha256 } from "../auth/secrets.ts";
import type { Ctx } from "../context.ts";
import { AppError } from "../errors.ts";
import { serverForAgentToken } from "../services/servers.ts";
import { type Principal, principalForApiToken, principalForSession } from "../services/users.ts";
import { checkCsrf } from "./csrf.ts";

export const SESSION_COOKIE = "doppio_session";

type ServerRow = NonNullable<Awaited<ReturnType<typeof serverForAgentToken>>>;

declare module "fastify" {
  interface FastifyRequest {
    principal?: Principal;
    agentServer?: ServerRow;
  }
}

function bearer(req: FastifyRequest): string | null {
  const header = req.headers.authorization;
  if (!header) return null;
  const match = /^Bearer\s+(\S+)$/i.exec(header);
  return match ? match[1]! : null;
}

/**
 * The signed-in user, from the session cookie (dashboard) or a personal API token (CLI).
 * A cookie-authenticated state change must also pass the CSRF check.
 */
export function requireUser(ctx: Ctx) {
  const publicOrigin = new URL(ctx.config.publicUrl).origin;
  return async (req: FastifyRequest, _reply: FastifyReply): Promise<void> => {
    const token = bearer(req);
    const cookie = req.cookies[SESSION_COOKIE];
    let principal: Principal | null = null;
    if (token?.startsWith("dpb_")) {
      principal = await principalForApiToken(ctx, token);
    } else if (cookie) {
      principal = await principalForSession(ctx, cookie);
      if (principal) checkCsrf(req, publicOrigin);
    }
    if (!principal) throw new AppError("unauthorized", "sign in first (session cookie or API token)");
    req.principal = principal;
  };
}

export function requireAdmin(ctx: Ctx) {
  const user = requireUser(ctx);
  return async (req: FastifyRequest, reply: FastifyReply): Promise<void> => {
    await user(req, reply);
    if (req.principal!.role !== "admin") throw new AppError("forbidden", "administrators only");
  };
}

/**
 * The server whose agent token is the bearer. Its request counts against the host's
 * requests in progress on this replica (services/agent-in-flight.ts) until its response is
 * done, and is refused when the host already has its fill; a claim long-poll (`"claim"`)
 * holds a claim seat instead (services/claim-seats.ts).
 */
export function requireAgent(ctx: Ctx, kind: "request" | "claim" = "request") {
  return async (req: FastifyRequest, reply: FastifyReply): Promise<void> => {
    const token = bearer(req);
    const server = token ? await serverForAgentToken(ctx, token) : null;
    if (!server) throw new AppError("unauthorized", "a valid agent token is required");
    req.agentServer = server;
    if (kind === "claim") return;
    if (!ctx.agentInFlight.enter(server.id)) {
      ctx.metrics.agentRequestsRefused.inc({ server: server.name });
      reply.header("retry-after", "1");
      throw new AppError(
        "rate_limited",
        `this host already has ${ctx.agentInFlight.limit} requests in progress here; wait for them to end`,
        { retryAfterSeconds: 1 },
      );
    }
    // "close" comes once, whether the response was sent or the connection died first.
    reply.raw.once("close", () => ctx.agentInFlight.leave(server.id));
  };
}

/** For routes that act on the session cookie themselves (logout): the same CSRF check. */
export function requireSameOrigin(ctx: Ctx) {
  const publicOrigin = new URL(ctx.config.publicUrl).origin;
  return async (req: FastifyRequest, _reply: FastifyReply): Promise<void> => {
    if (req.cookies[SESSION_COOKIE]) checkCsrf(req, publicOrigin);
  };
}

/** `/metrics` behind `metricsToken` when one is configured (compared in constant time). */
export function requireMetricsToken(ctx: Ctx) {
  const expected = ctx.config.metricsToken ? sha256(ctx.config.metricsToken) : null;
  return async (req: FastifyRequest, _reply: FastifyReply): Promise<void> => {
    if (!expected) return;
    const token = bearer(req);
    const given = Buffer.from(sha256(token ?? ""));
    if (!token || !timingSafeEqual(given, Buffer.from(expected))) {
      throw new AppError("unauthorized", "metrics need the metrics token (Authorization: Bearer …)");
    }
  };
}
