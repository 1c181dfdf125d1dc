import { VERIFICATION_TTL_HOURS, VERIFY_EMAIL_PAGE, type VerifyEmailResult } from "@doppio/contracts";
import { and, eq, gt, isNull } from "drizzle-orm";
import { newSecret, sha256 } from "../auth/secrets.ts";
import { reactToBalance } from "../billing/funds.ts";
import { grantTrial } from "../billing/trial.ts";
import type { Ctx } from "../context.ts";
import type { Db } from "../db/client.ts";
import { emailVerifications, users } from "../db/schema.ts";
import { AppError, notFound } from "../errors.ts";
import { audit } from "./audit.ts";
import { type Principal, principalForUser } from "./users.ts";

/**
 * Makes an account verified, in the caller's transaction, and grants its trial credit
 * (billing/trial.ts: once per account and per address). Only the request that flips
 * `email_verified_at` from null grants: a second, racing one waits on the row and finds it
 * set. Returns the credit granted and the balance after it (null when nothing was granted).
 */
export async function markAccountVerified(
  ctx: Ctx,
  tx: Db,
  userId: string,
): Promise<{ email: string; amount: number; balance: number | null } | null> {
  const [user] = await tx
    .update(users)
    .set({ emailVerifiedAt: ctx.clock.now() })
    .where(and(eq(users.id, userId), isNull(users.emailVerifiedAt)))
    .returning({ id: users.id, email: users.email });
  if (!user) return null;
  const trial = await grantTrial(ctx, tx, user);
  await audit(ctx, tx, {
    user: userId,
    action: "user.email_verified",
    targetType: "user",
    targetId: userId,
    data: { trialCredit: trial.amount },
  });
  return { email: user.email, ...trial };
}

/**
 * A fresh verification link for the account, mailed to its address (or written to the log
 * at info when no mail transport is configured). Only the token's sha256 is stored; the
 * account's older tokens are deleted in the same transaction, so only the newest link works.
 */
async function sendVerification(ctx: Ctx, user: { id: string; email: string }): Promise<void> {
  const token = newSecret("dpv");
  const now = ctx.clock.now();
  await ctx.db.transaction(async (tx) => {
    await tx.delete(emailVerifications).where(eq(emailVerifications.userId, user.id));
    await tx.insert(emailVerifications).values({
      tokenHash: sha256(token),
      userId: user.id,
      expiresAt: new Date(now.getTime() + VERIFICATION_TTL_HOURS * 3_600_000),
      createdAt: now,
    });
  });
  const link = `${new URL(VERIFY_EMAIL_PAGE, ctx.config.publicUrl).toString()}#token=${token}`;
  if (!ctx.mailer) {
    ctx.log.info({ user: user.id, email: user.email, link }, "email verification link (no mail transport)");
    return;
  }
  await ctx.mailer.send(
    user.email,
    "Verify your doppiobox email address",
    `Open this link to verify ${user.email} (it works once, for ${VERIFICATION_TTL_HOURS} hours):\n\n${link}\n\nIf you did not sign up for doppiobox, ignore this message.\n`,
  );
}

/** After a signup: the first link. A mail server that is down does not fail the signup. */
export async function sendFirstVerification(ctx: Ctx, user: { id: string; email: string }) {
  await sendVerification(ctx, user).catch((err: unknown) =>
    ctx.log.error({ err, user: user.id }, "could not send the verification link; the user can resend it"),
  );
}

/** Spends a link's token (once, unexpired, the newest) and verifies its account. */
export async function verifyEmail(ctx: Ctx, token: string): Promise<VerifyEmailResult> {
  const now = ctx.clock.now();
  const done = await ctx.db.transaction(async (tx) => {
    const [row] = await tx
      .update(emailVerifications)
      .set({ usedAt: now })
      .where(
        and(
          eq(emailVerifications.tokenHash, sha256(token)),
          isNull(emailVerifications.usedAt),
          gt(emailVerifications.expiresAt, now),
        ),
      )
      .returning({ userId: emailVerifications.userId });
    if (!row) return null;
    const verified = await markAccountVerified(ctx, tx, row.userId);
    if (verified) return { userId: row.userId, ...verified };
    // Verified meanwhile (an admin, another tab): the link still proves the address.
    const [user] = await tx.select({ email: users.email }).from(users).where(eq(users.id, row.userId));
    return { userId: row.userId, email: user!.email, amount: 0, balance: null };
  });
  if (!done) {
    throw new AppError(
      "bad_request",
      "this verification link is not valid: it was already used, replaced by a newer one, or has expired. Sign in and send a new one.",
    );
  }
  if (done.balance !== null) await reactToBalance(ctx, done.userId, done.balance);
  return { email: done.email, trialCredit: done.amount, currency: ctx.config.currency };
}

/**
 * A new link for the signed-in user, at most `verificationResendsPerHour` an hour (counted
 * per account in the database); returns the seconds to wait when refused, else 0.
 */
export async function resendVerification(ctx: Ctx, p: Principal): Promise<number> {
  if (p.emailVerified) throw new AppError("conflict", "your email address is already verified");
  const wait = await ctx.verificationResends.take(p.userId, ctx.clock.now().getTime());
  if (wait > 0) return Math.ceil(wait / 1000);
  try {
    await sendVerification(ctx, { id: p.userId, email: p.email });
  } catch (err) {
    ctx.log.error({ err, user: p.userId }, "could not send the verification link");
    throw new AppError(
      "unavailable",
      "the verification email could not be sent; try again shortly",
      undefined,
      {
        cause: err,
      },
    );
  }
  return 0;
}

/** An administrator vouches for an account's address (no mail transport, or by hand). */
export async function adminMarkVerified(ctx: Ctx, admin: Principal, email: string): Promise<Principal> {
  const [user] = await ctx.db.select({ id: users.id }).from(users).where(eq(users.email, email));
  if (!user) throw notFound("user");
  const done = await ctx.db.transaction(async (tx) => {
    const verified = await markAccountVerified(ctx, tx, user.id);
    await audit(ctx, tx, {
      user: admin.userId,
      action: "user.mark_verified",
      targetType: "user",
      targetId: user.id,
      data: { changed: verified !== null },
    });
    return verified;
  });
  if (done?.balance != null) await reactToBalance(ctx, user.id, done.balance);
  return (await principalForUser(ctx, user.id))!;
}
