import {
  ApiToken,
  CreatedToken,
  CreateTokenRequest,
  LoginRequest,
  Me,
  SignupRequest,
} from "@doppio/contracts";
import type { FastifyPluginAsyncZod } from "fastify-type-provider-zod";
import { z } from "zod";
import { sha256 } from "../auth/secrets.ts";
import type { Ctx } from "../context.ts";
import { requireSameOrigin, requireUser, SESSION_COOKIE } from "../http/auth.ts";
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

export function authRoutes(ctx: Ctx): FastifyPluginAsyncZod {
  const secure = ctx.config.publicUrl.startsWith("https:");
  const user = requireUser(ctx);
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

    app.post(
      "/auth/signup",
      {
        config: { rateLimit },
        schema: { tags: ["auth"], body: SignupRequest, response: { 201: Me } },
      },
      async (req, reply) => {
        const principal = await signup(ctx, req.body);
        await startSession(principal.userId, reply);
        return reply.code(201).send(toMe(principal));
      },
    );

    app.post(
      "/auth/login",
      { config: { rateLimit }, schema: { tags: ["auth"], body: LoginRequest, response: { 200: Me } } },
      async (req, reply) => {
        const principal = await login(ctx, req.body.email, req.body.password);
        await startSession(principal.userId, reply);
        return toMe(principal);
      },
    );

    app.post("/auth/logout", { onRequest: sameOrigin, schema: { tags: ["auth"] } }, async (req, reply) => {
      const cookie = req.cookies[SESSION_COOKIE];
      if (cookie) await deleteSession(ctx, cookie);
      if (cookie) await endBoxAccess(ctx, sha256(cookie));
      reply.clearCookie(SESSION_COOKIE, { path: "/" });
      return reply.code(204).send();
    });

    app.get("/me", { onRequest: user, schema: { tags: ["auth"], response: { 200: Me } } }, async (req) =>
      toMe(req.principal!),
    );

    app.get(
      "/tokens",
      {
        onRequest: user,
        schema: { tags: ["tokens"], response: { 200: z.object({ tokens: z.array(ApiToken) }) } },
      },
      async (req) => ({ tokens: await listApiTokens(ctx, req.principal!) }),
    );

    app.post(
      "/tokens",
      {
        onRequest: user,
        schema: { tags: ["tokens"], body: CreateTokenRequest, response: { 201: CreatedToken } },
      },
      async (req, reply) => reply.code(201).send(await createApiToken(ctx, req.principal!, req.body)),
    );

    app.delete(
      "/tokens/:id",
      { onRequest: user, schema: { tags: ["tokens"], params: z.object({ id: z.string().uuid() }) } },
      async (req, reply) => {
        await revokeApiToken(ctx, req.principal!, req.params.id);
        return reply.code(204).send();
      },
    );
  };
}
