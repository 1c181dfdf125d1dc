import { eq } from "drizzle-orm";
import type { Ctx } from "../context.ts";
import { githubAccounts } from "../db/schema.ts";
import { AppError } from "../errors.ts";
import { audit } from "../services/audit.ts";
import { GitHubRefused, type UserToken } from "./client.ts";
import type { GitHub } from "./service.ts";

/** A user token this close to expiry is refreshed before use. */
const REFRESH_MARGIN_MS = 5 * 60_000;

const tokenPurpose = (userId: string) => `github_accounts.token.${userId}`;
const refreshPurpose = (userId: string) => `github_accounts.refresh_token.${userId}`;

/** The `github_accounts` columns for a token GitHub just issued: both tokens sealed, their expiries. */
export function userTokenColumns(ctx: Ctx, gh: GitHub, userId: string, t: UserToken) {
  const now = ctx.clock.now().getTime();
  const at = (seconds: number | null) => (seconds === null ? null : new Date(now + seconds * 1000));
  return {
    tokenSealed: gh.app.box.seal(t.token, tokenPurpose(userId)),
    tokenExpiresAt: at(t.expiresIn),
    refreshTokenSealed: t.refreshToken ? gh.app.box.seal(t.refreshToken, refreshPurpose(userId)) : null,
    refreshTokenExpiresAt: t.refreshToken ? at(t.refreshTokenExpiresIn) : null,
  };
}

const relink = () =>
  new AppError(
    "conflict",
    "your GitHub authorization has expired; link GitHub again from settings (Sign in with GitHub)",
  );

/**
 * The user's GitHub user token, opened, or null when GitHub is not linked. An expiring token
 * (GitHub's default for apps: 8 hours) close to its end is first swapped for a new one with
 * the refresh token (6 months, one use), as GitHub documents in "Refreshing user access
 * tokens". The row is locked meanwhile, so two requests never spend one refresh token twice.
 */
export async function userToken(ctx: Ctx, gh: GitHub, userId: string): Promise<string | null> {
  const fresh = (row: typeof githubAccounts.$inferSelect) =>
    !row.tokenExpiresAt || row.tokenExpiresAt.getTime() - REFRESH_MARGIN_MS > ctx.clock.now().getTime();
  const [row] = await ctx.db.select().from(githubAccounts).where(eq(githubAccounts.userId, userId));
  if (!row) return null;
  if (fresh(row)) return gh.app.box.open(row.tokenSealed, tokenPurpose(userId));
  return ctx.db.transaction(async (tx) => {
    const [locked] = await tx
      .select()
      .from(githubAccounts)
      .where(eq(githubAccounts.userId, userId))
      .for("update");
    if (!locked) return null;
    // Another request refreshed it while this one waited for the lock.
    if (fresh(locked)) return gh.app.box.open(locked.tokenSealed, tokenPurpose(userId));
    const expired = locked.refreshTokenExpiresAt !== null && locked.refreshTokenExpiresAt <= ctx.clock.now();
    if (!locked.refreshTokenSealed || expired) throw relink();
    let next: UserToken;
    try {
      next = await gh.api.refreshUserToken(
        gh.app.box.open(locked.refreshTokenSealed, refreshPurpose(userId)),
      );
    } catch (err) {
      // bad_refresh_token: used, expired or revoked (the user removed the app's authorization).
      if (err instanceof GitHubRefused) throw relink();
      throw err;
    }
    await tx
      .update(githubAccounts)
      .set(userTokenColumns(ctx, gh, userId, next))
      .where(eq(githubAccounts.userId, userId));
    await audit(ctx, tx, {
      user: userId,
      action: "github.token.refresh",
      targetType: "user",
      targetId: userId,
      data: { login: locked.login },
    });
    return next.token;
  });
}
