import type { FastifyPluginAsyncZod } from "fastify-type-provider-zod";
import { sha256 } from "../auth/secrets.ts";
import type { Ctx } from "../context.ts";
import { AppError } from "../errors.ts";
import { requireAdmin, requireSameOrigin, requireUser, SESSION_COOKIE } from "../http/auth.ts";
import { endBoxAccess } from "../services/access.ts";
import {
  createApiToken,
  createSession,
  deleteSession,
  listApiTokens,
  login,
  revokeApiToken,
  signup,
  toMe,
} from "../services/users.ts";
import { adminMarkVerified, resendVerification, verifyEmail } from "../services/verification.ts";
import { endpoint } from "./contract.ts";

export function authRoutes(ctx: Ctx): FastifyPluginAsyncZod {
  const secure = ctx.config.publicUrl.startsWith("https:");
  const user = requireUser(ctx);
  const admin = requireAdmin(ctx);
  const sameOrigin = requireSameOrigin(ctx);
  const rateLimit = { max: ctx.config.authRateLimitPerMinute, timeWindow: 60_000 };

  return async (app) => {
    const startSession = async (userId: string, reply: import("fastify").FastifyReply) => {
      const session = await createSession(ctx, userId);
      reply.setCookie(SESSION_COOKIE, session.token, {
        httpOnly: true,
        secure,
        sameSite: "lax",
        path: "/",
        expires: session.expiresAt,
      });
    };

    app.route({
      ...endpoint("signup"),
      config: { rateLimit },
      handler: async (req, reply) => {
        const principal = await signup(ctx, req.body);
        await startSession(principal.userId, reply);
        return reply.code(201).send(toMe(principal));
      },
    });

    app.route({
      ...endpoint("login"),
      config: { rateLimit },
      handler: async (req, reply) => {
        const principal = await login(ctx, req.body.email, req.body.password);
        await startSession(principal.userId, reply);
        return toMe(principal);
      },
    });

    app.route({
      ...endpoint("logout"),
      onRequest: sameOrigin,
      handler: async (req, reply) => {
        const cookie = req.cookies[SESSION_COOKIE];
        if (cookie) await deleteSession(ctx, cookie);
        if (cookie) await endBoxAccess(ctx, sha256(cookie));
        reply.clearCookie(SESSION_COOKIE, { path: "/" });
        return reply.code(204).send(null);
      },
    });

    app.route({
      ...endpoint("getMe"),
      onRequest: user,
      handler: async (req) => toMe(req.principal!),
    });

    app.route({
      ...endpoint("verifyEmail"),
      config: { rateLimit },
      handler: async (req) => verifyEmail(ctx, req.body.token),
    });

    app.route({
      ...endpoint("resendVerification"),
      onRequest: user,
      handler: async (req, reply) => {
        const seconds = await resendVerification(ctx, req.principal!);
        if (seconds > 0) {
          reply.header("retry-after", String(seconds));
          throw new AppError(
            "rate_limited",
            `too many verification emails (at most ${ctx.verificationResends.limit} an hour); try again in ${seconds} s`,
            { retryAfterSeconds: seconds },
          );
        }
        return reply.code(204).send(null);
      },
    });

    app.route({
      ...endpoint("markVerified"),
      onRequest: admin,
      handler: async (req) => toMe(await adminMarkVerified(ctx, req.principal!, req.body.email)),
    });

    app.route({
      ...endpoint("listTokens"),
      onRequest: user,
      handler: async (req) => ({ tokens: await listApiTokens(ctx, req.principal!) }),
    });

    app.route({
      ...endpoint("createToken"),
      onRequest: user,
      handler: async (req, reply) =>
        reply.code(201).send(await createApiToken(ctx, req.principal!, req.body)),
    });

    app.route({
      ...endpoint("revokeToken"),
      onRequest: user,
      handler: async (req, reply) => {
        await revokeApiToken(ctx, req.principal!, req.params.id);
        return reply.code(204).send(null);
      },
    });
  };
}
