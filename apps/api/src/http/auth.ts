import type { FastifyReply, FastifyRequest } from "fastify";
import type { Ctx } from "../context.ts";
import { AppError } from "../errors.ts";
import { serverForAgentToken } from "../services/servers.ts";
import { type Principal, principalForApiToken, principalForSession } from "../services/users.ts";

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

/** The signed-in user, from the session cookie (dashboard) or a personal API token (CLI). */
export function requireUser(ctx: Ctx) {
  return async (req: FastifyRequest, _reply: FastifyReply): Promise<void> => {
    const token = bearer(req);
    const cookie = req.cookies[SESSION_COOKIE];
    const principal = token?.startsWith("dpb_")
      ? await principalForApiToken(ctx, token)
      : cookie
        ? await principalForSession(ctx, cookie)
        : null;
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

/** The server whose agent token is the bearer. */
export function requireAgent(ctx: Ctx) {
  return async (req: FastifyRequest, _reply: FastifyReply): Promise<void> => {
    const token = bearer(req);
    const server = token ? await serverForAgentToken(ctx, token) : null;
    if (!server) throw new AppError("unauthorized", "a valid agent token is required");
    req.agentServer = server;
  };
}
