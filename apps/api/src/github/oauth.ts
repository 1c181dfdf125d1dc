import { createHash, randomBytes } from "node:crypto";
import type { GitHubSignInError } from "@doppio/contracts";
import { and, eq, gt, isNull } from "drizzle-orm";
import { sha256 } from "../auth/secrets.ts";
import type { Ctx } from "../context.ts";
import { githubAccounts, githubOauthStates, users } from "../db/schema.ts";
import { audit } from "../services/audit.ts";
import { createAccount, isUniqueViolation } from "../services/users.ts";
import { GitHubRefused } from "./client.ts";
import type { GitHub } from "./service.ts";
import { userTokenColumns } from "./user-tokens.ts";

/** How long a started sign-in may take at GitHub before its state stops being accepted. */
const OAUTH_STATE_TTL_MS = 10 * 60_000;
/** The cookie that binds a `state` to the browser that started the flow. */
export const OAUTH_BROWSER_COOKIE = "doppio_github_oauth";
const OAUTH_CALLBACK_PATH = "/api/v1/auth/github/callback";

/** Why a GitHub sign-in or link did not happen (the contract's closed set, shown by the dashboard). */
export type OAuthFailure = Exclude<GitHubSignInError, "not_configured">;

export class OAuthFailed extends Error {
  constructor(
    readonly reason: OAuthFailure,
    readonly intent: "login" | "link",
  ) {
    super(`GitHub sign-in failed: ${reason}`);
  }
}

const verifierPurpose = (stateHash: string) => `github_oauth_states.verifier.${stateHash}`;

/**
 * Starts the OAuth web flow: a random `state` (kept as sha256) bound to a random browser
 * nonce (the caller sets it as an HttpOnly cookie), and a PKCE verifier (S256, sealed).
 */
export async function startOAuth(
  ctx: Ctx,
  gh: GitHub,
  req: { intent: "login" | "link"; userId?: string },
): Promise<{ authorizeUrl: string; browserNonce: string }> {
  const state = randomBytes(32).toString("base64url");
  const browserNonce = randomBytes(32).toString("base64url");
  const verifier = randomBytes(48).toString("base64url");
  const stateHash = sha256(state);
  await ctx.db.insert(githubOauthStates).values({
    stateHash,
    browserHash: sha256(browserNonce),
    intent: req.intent,
    userId: req.userId ?? null,
    verifierSealed: gh.app.box.seal(verifier, verifierPurpose(stateHash)),
    expiresAt: new Date(ctx.clock.now().getTime() + OAUTH_STATE_TTL_MS),
  });
  const url = new URL(`${gh.app.webUrl}/login/oauth/authorize`);
  url.searchParams.set("client_id", gh.app.clientId);
  url.searchParams.set("redirect_uri", callbackUrl(ctx));
  url.searchParams.set("state", state);
  url.searchParams.set("code_challenge", createHash("sha256").update(verifier).digest("base64url"));
  url.searchParams.set("code_challenge_method", "S256");
  return { authorizeUrl: url.toString(), browserNonce };
}

const callbackUrl = (ctx: Ctx) => new URL(OAUTH_CALLBACK_PATH, ctx.config.publicUrl).toString();

/**
 * Finishes the flow. The state must exist, be unexpired, unused, and bound to this browser;
 * it is spent before GitHub is asked, so a replayed callback fails whatever GitHub says.
 * Sign-in: the linked account, or a new one from the verified primary email. Link: the
 * signed-in user who started it (`currentUserId` must still be that user).
 */
export async function finishOAuth(
  ctx: Ctx,
  gh: GitHub,
  req: { state: string; code: string; browserNonce: string | undefined; currentUserId: string | null },
): Promise<{ userId: string; intent: "login" | "link" }> {
  const stateHash = sha256(req.state);
  const [row] = await ctx.db
    .update(githubOauthStates)
    .set({ usedAt: ctx.clock.now() })
    .where(
      and(
        eq(githubOauthStates.stateHash, stateHash),
        isNull(githubOauthStates.usedAt),
        gt(githubOauthStates.expiresAt, ctx.clock.now()),
      ),
    )
    .returning();
  const intent = row?.intent ?? "login";
  if (!row || !req.browserNonce || sha256(req.browserNonce) !== row.browserHash) {
    throw new OAuthFailed("state_invalid", intent);
  }
  if (row.intent === "link" && row.userId !== req.currentUserId)
    throw new OAuthFailed("state_invalid", intent);

  let token: Awaited<ReturnType<GitHub["api"]["exchangeCode"]>>;
  let user: Awaited<ReturnType<GitHub["api"]["user"]>>;
  try {
    token = await gh.api.exchangeCode({
      code: req.code,
      redirectUri: callbackUrl(ctx),
      codeVerifier: gh.app.box.open(row.verifierSealed, verifierPurpose(stateHash)),
    });
  } catch (err) {
    if (err instanceof GitHubRefused) throw new OAuthFailed("code_rejected", intent);
    throw err;
  }
  try {
    user = await gh.api.user(token.token);
  } catch (err) {
    if (err instanceof GitHubRefused) throw new OAuthFailed("github_unavailable", intent);
    throw err;
  }

  const [linked] = await ctx.db.select().from(githubAccounts).where(eq(githubAccounts.githubId, user.id));
  let userId: string;
  let createdByGithub = false;
  if (row.intent === "link") {
    if (linked && linked.userId !== row.userId) throw new OAuthFailed("already_linked", intent);
    userId = row.userId!;
  } else if (linked) {
    userId = linked.userId;
  } else {
    if (!user.verifiedPrimaryEmail) throw new OAuthFailed("email_unverified", intent);
    const email = user.verifiedPrimaryEmail.toLowerCase();
    const [existing] = await ctx.db.select({ id: users.id }).from(users).where(eq(users.email, email));
    // Never sign into an existing account by email alone: its owner links GitHub from settings.
    if (existing) throw new OAuthFailed("email_taken", intent);
    try {
      // A password nobody knows: this account signs in with GitHub.
      const created = await createAccount(
        ctx,
        { email, password: randomBytes(32).toString("base64url"), name: user.name ?? user.login },
        "user",
        // GitHub vouches for its verified primary email: verified at creation, with the trial.
        { verified: true },
      );
      userId = created.userId;
      createdByGithub = true;
    } catch (err) {
      if (isUniqueViolation(err) || (err as { code?: string }).code === "conflict") {
        throw new OAuthFailed("email_taken", intent);
      }
      throw err;
    }
  }

  const values = {
    userId,
    githubId: user.id,
    login: user.login,
    ...userTokenColumns(ctx, gh, userId, token),
  };
  try {
    await ctx.db
      .insert(githubAccounts)
      .values({ ...values, createdByGithub, linkedAt: ctx.clock.now() })
      .onConflictDoUpdate({ target: githubAccounts.userId, set: values });
  } catch (err) {
    // The same GitHub account linked to another user meanwhile.
    if (isUniqueViolation(err)) throw new OAuthFailed("already_linked", intent);
    throw err;
  }
  await audit(ctx, ctx.db, {
    user: userId,
    action: row.intent === "link" ? "github.link" : "github.login",
    targetType: "user",
    targetId: userId,
    data: { githubId: user.id, login: user.login, created: createdByGithub },
  });
  return { userId, intent: row.intent };
}
