import { routes } from "@doppio/contracts";
import type { FastifyRequest } from "fastify";
import type { FastifyPluginAsyncZod } from "fastify-type-provider-zod";
import type { Ctx } from "../context.ts";
import { AppError } from "../errors.ts";
import { requireUser, SESSION_COOKIE } from "../http/auth.ts";
import { handoffUrl } from "../services/access.ts";
import { endpoint } from "./contract.ts";

/**
 * Private box URLs (code-server, dev ports, private sites): the agent sends a browser
 * without its access cookie here; a signed-in owner is sent back with a hand-off token,
 * anyone else to the dashboard's sign-in page.
 */
export function accessRoutes(ctx: Ctx): FastifyPluginAsyncZod {
  const user = requireUser(ctx);
  return async (app) => {
    app.route({
      ...endpoint("openBoxAccess"),
      handler: async (req, reply) => {
        try {
          await user(req, reply);
        } catch (err) {
          if (!(err instanceof AppError) || err.code !== "unauthorized") throw err;
          const back = `${routes.openBoxAccess.path}?${new URLSearchParams({ host: req.query.host, next: req.query.next })}`;
          return reply.redirect(`/dashboard/login?${new URLSearchParams({ next: back })}`);
        }
        const url = await handoffUrl(ctx, req.principal!, signInSecret(req), req.query.host, req.query.next);
        return reply.redirect(url);
      },
    });
  };
}

/**
 * The secret requireUser accepted (an API token takes precedence over the session cookie
 * there too): signing out of it ends the box-access cookies this hand-off leads to.
 */
function signInSecret(req: FastifyRequest): string {
  const bearer = /^Bearer\s+(dpb_\S+)$/i.exec(req.headers.authorization ?? "");
  return bearer?.[1] ?? req.cookies[SESSION_COOKIE]!;
}
