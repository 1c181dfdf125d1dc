import { type GitHubStatus, routes } from "@doppio/contracts";
import { eq } from "drizzle-orm";
import type { FastifyReply, FastifyRequest } from "fastify";
import type { FastifyPluginAsyncZod } from "fastify-type-provider-zod";
import type { Ctx } from "../context.ts";
import { githubAccounts, githubInstallationUsers } from "../db/schema.ts";
import { AppError } from "../errors.ts";
import { requireUser, SESSION_COOKIE } from "../http/auth.ts";
import { endpoint } from "../routes/contract.ts";
import { audit } from "../services/audit.ts";
import { createSession, principalForSession } from "../services/users.ts";
import { completeSetup, installUrl } from "./connect.ts";
import { connectedInstallations, usableRepos } from "./installations.ts";
import { finishOAuth, OAUTH_BROWSER_COOKIE, OAuthFailed, startOAuth } from "./oauth.ts";
import type { GitHub } from "./service.ts";
import { handleWebhook } from "./webhooks.ts";

const OAUTH_COOKIE_PATH = "/api/v1/auth/github";
const WEBHOOK_BODY_LIMIT = 1024 * 1024;

function github(ctx: Ctx): GitHub {
  // Not an outage: this install has no GitHub App, so there is nothing there (404).
  if (!ctx.github) throw new AppError("not_found", "GitHub is not configured on this doppiobox");
  return ctx.github;
}

async function status(ctx: Ctx, userId: string): Promise<GitHubStatus> {
  if (!ctx.github)
    return { configured: false, appSlug: null, account: null, installations: [], repositories: [] };
  const [account] = await ctx.db.select().from(githubAccounts).where(eq(githubAccounts.userId, userId));
  const installs = await connectedInstallations(ctx.db, userId);
  const repos = await usableRepos(ctx.db, userId);
  return {
    configured: true,
    appSlug: ctx.github.app.appSlug,
    account: account
      ? {
          login: account.login,
          id: account.githubId,
          linkedAt: account.linkedAt.toISOString(),
          createdByGithub: account.createdByGithub,
        }
      : null,
    installations: installs.map((i) => ({
      id: i.id,
      account: i.accountLogin,
      accountType: i.accountType,
      repositorySelection: i.repositorySelection,
      state: i.removedAt ? "removed" : i.suspendedAt ? "suspended" : "active",
    })),
    repositories: repos.map((r) => ({
      fullName: r.fullName,
      private: r.private,
      installationId: r.installationId,
    })),
  };
}

/** The signed-in users' GitHub pages and the OAuth sign-in (browser redirects). */
export function githubRoutes(ctx: Ctx): FastifyPluginAsyncZod {
  const user = requireUser(ctx);
  const secure = ctx.config.publicUrl.startsWith("https:");

  const sessionUserId = async (req: FastifyRequest): Promise<string | null> => {
    const cookie = req.cookies[SESSION_COOKIE];
    return cookie ? ((await principalForSession(ctx, cookie))?.userId ?? null) : null;
  };

  return async (app) => {
    app.route({
      ...endpoint("getGitHub"),
      onRequest: user,
      handler: async (req) => status(ctx, req.principal!.userId),
    });

    app.route({
      ...endpoint("listGitHubRepos"),
      onRequest: user,
      handler: async (req) => ({ repositories: (await status(ctx, req.principal!.userId)).repositories }),
    });

    app.route({
      ...endpoint("connectGitHub"),
      onRequest: user,
      handler: async (req) => {
        const gh = github(ctx);
        const [account] = await ctx.db
          .select({ login: githubAccounts.login })
          .from(githubAccounts)
          .where(eq(githubAccounts.userId, req.principal!.userId));
        if (!account)
          throw new AppError("conflict", "link your GitHub account first (settings → Link GitHub)");
        return installUrl(ctx, gh, req.principal!.userId);
      },
    });

    app.route({
      ...endpoint("unlinkGitHub"),
      onRequest: user,
      handler: async (req, reply) => {
        const userId = req.principal!.userId;
        const [account] = await ctx.db.select().from(githubAccounts).where(eq(githubAccounts.userId, userId));
        if (!account) return reply.code(204).send(null);
        if (account.createdByGithub) {
          throw new AppError(
            "conflict",
            "this account was made by signing in with GitHub and has no password; unlinking would lock you out",
          );
        }
        await ctx.db.transaction(async (tx) => {
          await tx.delete(githubAccounts).where(eq(githubAccounts.userId, userId));
          await tx.delete(githubInstallationUsers).where(eq(githubInstallationUsers.userId, userId));
          await audit(ctx, tx, {
            user: userId,
            action: "github.unlink",
            targetType: "user",
            targetId: userId,
            data: { githubId: account.githubId, login: account.login },
          });
        });
        return reply.code(204).send(null);
      },
    });

    app.route({
      ...endpoint("githubSetup"),
      handler: async (req, reply) => {
        try {
          await user(req, reply);
        } catch (err) {
          if (!(err instanceof AppError) || err.code !== "unauthorized") throw err;
          const back = `${routes.githubSetup.path}?${new URLSearchParams({
            installation_id: String(req.query.installation_id),
            state: req.query.state,
          })}`;
          return reply.redirect(`/dashboard/login?${new URLSearchParams({ next: back })}`);
        }
        await completeSetup(ctx, github(ctx), {
          userId: req.principal!.userId,
          state: req.query.state,
          installationId: req.query.installation_id,
        });
        return reply.redirect("/dashboard/settings?github=connected");
      },
    });

    app.route({
      ...endpoint("githubSignIn"),
      handler: async (req, reply) => {
        // The login page always offers the button; without an app it explains instead.
        if (!ctx.github) return reply.redirect("/dashboard/login?github_error=not_configured");
        const gh = ctx.github;
        let userId: string | undefined;
        if (req.query.intent === "link") {
          // Linking is for the browser's own session; an API token cannot start it.
          userId = (await sessionUserId(req)) ?? undefined;
          if (!userId) return reply.redirect("/dashboard/login?next=%2Fdashboard%2Fsettings");
        }
        const started = await startOAuth(ctx, gh, { intent: req.query.intent, userId });
        reply.setCookie(OAUTH_BROWSER_COOKIE, started.browserNonce, {
          httpOnly: true,
          secure,
          sameSite: "lax",
          path: OAUTH_COOKIE_PATH,
          maxAge: 600,
        });
        return reply.redirect(started.authorizeUrl);
      },
    });

    app.route({
      ...endpoint("githubCallback"),
      handler: async (req, reply) => {
        const browserNonce = req.cookies[OAUTH_BROWSER_COOKIE];
        reply.clearCookie(OAUTH_BROWSER_COOKIE, { path: OAUTH_COOKIE_PATH });
        const fail = (reason: string, intent: "login" | "link") =>
          reply.redirect(
            `${intent === "link" ? "/dashboard/settings" : "/dashboard/login"}?${new URLSearchParams({ github_error: reason })}`,
          );
        if (!ctx.github) return fail("not_configured", "login");
        if (!req.query.code || !req.query.state)
          return fail(req.query.state ? "code_rejected" : "state_invalid", "login");
        try {
          const done = await finishOAuth(ctx, ctx.github, {
            state: req.query.state,
            code: req.query.code,
            browserNonce,
            currentUserId: await sessionUserId(req),
          });
          if (done.intent === "link") return reply.redirect("/dashboard/settings?github=linked");
          await startSession(ctx, reply, done.userId, secure);
          return reply.redirect("/dashboard/");
        } catch (err) {
          if (err instanceof OAuthFailed) return fail(err.reason, err.intent);
          throw err;
        }
      },
    });
  };
}

async function startSession(ctx: Ctx, reply: FastifyReply, userId: string, secure: boolean) {
  const session = await createSession(ctx, userId);
  reply.setCookie(SESSION_COOKIE, session.token, {
    httpOnly: true,
    secure,
    sameSite: "lax",
    path: "/",
    expires: session.expiresAt,
  });
}

/**
 * GitHub's webhooks, in their own plugin: the body is kept as raw bytes, because the
 * signature is over exactly those bytes. Answered as soon as the delivery is recorded.
 */
export function githubWebhookRoutes(ctx: Ctx): FastifyPluginAsyncZod {
  return async (app) => {
    app.addContentTypeParser("application/json", { parseAs: "buffer" }, (_req, body, done) =>
      done(null, body),
    );
    app.route({
      ...endpoint("githubWebhook"),
      // An installation event lists its repositories (~120 bytes each): more than the API's
      // default body limit for large accounts, far less than this.
      bodyLimit: WEBHOOK_BODY_LIMIT,
      handler: async (req) => {
        const header = (name: string) => {
          const v = req.headers[name];
          return typeof v === "string" ? v : undefined;
        };
        const body = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
        const outcome = await handleWebhook(ctx, github(ctx), {
          body,
          signature: header("x-hub-signature-256"),
          event: header("x-github-event"),
          delivery: header("x-github-delivery"),
        });
        return { outcome };
      },
    });
  };
}
