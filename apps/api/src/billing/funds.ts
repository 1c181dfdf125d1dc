import { canPerform, formatMoney, type WalletEvent } from "@doppio/contracts";
import { and, eq, isNull, sql } from "drizzle-orm";
import type { Ctx } from "../context.ts";
import type { Db } from "../db/client.ts";
import { boxes, teamMembers, users, wallets } from "../db/schema.ts";
import { AppError } from "../errors.ts";
import { performAction } from "../services/boxes.ts";
import { principalForUser } from "../services/users.ts";
import { balanceOf } from "./ledger.ts";

/** A card top-up whose delayed payment failed: nothing was credited. */
export interface FailedTopUp {
  sessionId: string;
  amount: number;
  currency: string;
}

/** How the owner of a wallet is told about it (an email in production). */
export interface WalletNotifier {
  /** The balance ran low or ran out. */
  walletWarning(user: { id: string; email: string }, event: WalletEvent): Promise<void>;
  /** A top-up paid with a delayed method (a bank debit) failed after Checkout. */
  topUpFailed(user: { id: string; email: string }, topUp: FailedTopUp): Promise<void>;
}
/** The default: the notices go to the log (no mail transport is configured). */
export const logNotifier = (ctx: Pick<Ctx, "log">): WalletNotifier => ({
  async walletWarning(user, event) {
    ctx.log.warn({ user: user.id, balance: event.balance, state: event.state }, "wallet warning");
  },
  async topUpFailed(user, topUp) {
    ctx.log.warn({ user: user.id, ...topUp }, "top-up payment failed");
  },
});

/** Refuses to create or start a box on a wallet with nothing left (402). */
export async function requireCredit(ctx: Ctx, db: Db, userId: string): Promise<void> {
  const balance = await balanceOf(db, userId);
  if (balance > 0) return;
  throw new AppError(
    "payment_required",
    `your wallet is empty (balance ${formatMoney(balance, ctx.config.currency)}): top up to create or start boxes`,
    { balance, currency: ctx.config.currency },
  );
}

export function walletState(ctx: Ctx, balance: number): "low" | "empty" | null {
  if (balance <= 0) return "empty";
  if (balance <= ctx.config.lowBalanceThreshold) return "low";
  return null;
}

/**
 * After the balance moved: warn once per crossing (SSE `wallet` event to the user's teams
 * and the notifier), and at zero stop the user's running boxes through the ordinary stop
 * job (never deleting anything). A recovered balance clears the warning.
 */
export async function reactToBalance(ctx: Ctx, userId: string, balance: number): Promise<void> {
  const state = walletState(ctx, balance);
  const changed = await ctx.db
    .update(wallets)
    .set({ warnedState: state })
    .where(and(eq(wallets.userId, userId), sql`${wallets.warnedState} IS DISTINCT FROM ${state}`))
    .returning({ userId: wallets.userId });
  if (changed.length > 0 && state !== null) {
    const event: WalletEvent = {
      balance,
      state,
      message:
        state === "empty"
          ? `Your wallet is empty (${formatMoney(balance, ctx.config.currency)}): running boxes are being stopped. Top up to start them again.`
          : `Your balance is low (${formatMoney(balance, ctx.config.currency)}); boxes stop when it reaches zero.`,
    };
    const teams = await ctx.db
      .select({ teamId: teamMembers.teamId })
      .from(teamMembers)
      .where(eq(teamMembers.userId, userId));
    for (const t of teams) ctx.bus.publish(t.teamId, { type: "wallet", wallet: event });
    const [user] = await ctx.db
      .select({ id: users.id, email: users.email })
      .from(users)
      .where(eq(users.id, userId));
    if (user) {
      await ctx.walletNotifier
        .walletWarning(user, event)
        .catch((err: unknown) => ctx.log.error({ err, user: userId }, "wallet notifier failed"));
    }
  }
  if (state === "empty") await stopRunningBoxes(ctx, userId);
}

/**
 * After a box's state changed: a box that came up (a start, a create or a wake that was
 * under way when the wallet ran out) is stopped at once if its owner's wallet is empty,
 * whether or not this change settled anything.
 */
export async function reactToBoxChange(ctx: Ctx, userId: string, status: string): Promise<void> {
  if (status !== "running") return;
  const balance = await balanceOf(ctx.db, userId);
  if (walletState(ctx, balance) === "empty") await stopRunningBoxes(ctx, userId);
}

/**
 * Stops every running box of the user with the same job a user's stop queues. A box still
 * starting cannot be stopped yet; it is stopped when it reaches running (reactToBoxChange).
 */
async function stopRunningBoxes(ctx: Ctx, userId: string): Promise<void> {
  const owned = await ctx.db
    .select({ slug: boxes.slug, status: boxes.status, teamId: boxes.teamId })
    .from(boxes)
    .where(and(eq(boxes.ownerId, userId), isNull(boxes.deletedAt)));
  const running = owned.filter((b) => b.status === "running" && canPerform(b.status, "stop"));
  if (running.length === 0) return;
  const principal = await principalForUser(ctx, userId);
  if (!principal) return;
  for (const box of running) {
    try {
      await performAction(ctx, { ...principal, teamId: box.teamId }, box.slug, "stop");
      ctx.log.info({ user: userId, box: box.slug }, "wallet empty: box stopped");
    } catch (err) {
      // Another job in flight: the next settlement tries again.
      ctx.log.warn({ err, user: userId, box: box.slug }, "wallet empty: could not stop box yet");
    }
  }
}
