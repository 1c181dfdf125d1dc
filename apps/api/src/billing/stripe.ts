import type { TopUp } from "@doppio/contracts";
import { and, desc, eq, inArray, like, sql } from "drizzle-orm";
import Stripe from "stripe";
import type { ApiConfig } from "../config.ts";
import type { Ctx } from "../context.ts";
import type { Db } from "../db/client.ts";
import { ledgerEntries, stripeEvents, teamMembers, topUps, users } from "../db/schema.ts";
import { AppError } from "../errors.ts";
import type { Principal } from "../services/users.ts";
import { type FailedTopUp, reactToBalance } from "./funds.ts";
import { appendEntry } from "./ledger.ts";

/** The Stripe client when card top-ups are configured (secret key and webhook secret), else null. */
export function stripeClient(config: ApiConfig): Stripe | null {
  if (!config.stripeSecretKey || !config.stripeWebhookSecret) return null;
  return new Stripe(config.stripeSecretKey, {
    maxNetworkRetries: 1,
    timeout: 20_000,
    telemetry: false,
    ...(config.stripeApi ?? {}),
  });
}

const idOf = (x: string | { id: string } | null | undefined): string | null =>
  typeof x === "string" ? x : (x?.id ?? null);

/** A Checkout Session for `amount` minor units; the wallet is credited only by its webhook. */
export async function createTopUp(
  ctx: Ctx,
  p: Principal,
  amount: number,
): Promise<{ url: string; sessionId: string }> {
  if (!ctx.stripe) {
    throw new AppError(
      "not_configured",
      "card payments are not configured on this doppiobox; ask an administrator to credit your wallet",
    );
  }
  const { topUpMin, topUpMax, currency } = ctx.config;
  if (amount < topUpMin || amount > topUpMax) {
    throw new AppError("validation_failed", `a top-up is between ${topUpMin} and ${topUpMax} minor units`, {
      field: "amount",
      min: topUpMin,
      max: topUpMax,
    });
  }
  const dashboard = new URL("/dashboard/billing", ctx.config.publicUrl).toString();
  let session: Stripe.Checkout.Session;
  try {
    session = await ctx.stripe.checkout.sessions.create({
      mode: "payment",
      client_reference_id: p.userId,
      customer_email: p.email,
      line_items: [
        {
          quantity: 1,
          price_data: {
            currency: currency.toLowerCase(),
            unit_amount: amount,
            product_data: { name: "doppiobox wallet top-up" },
          },
        },
      ],
      metadata: { doppio_user: p.userId },
      success_url: `${dashboard}?topup=done`,
      cancel_url: `${dashboard}?topup=cancelled`,
    });
  } catch (err) {
    ctx.log.error({ err, user: p.userId }, "stripe checkout session failed");
    throw new AppError("unavailable", "the payment provider did not answer; try again shortly", undefined, {
      cause: err,
    });
  }
  if (!session.url) throw new AppError("unavailable", "the payment provider gave no checkout page");
  await ctx.db.insert(topUps).values({
    sessionId: session.id,
    userId: p.userId,
    amount,
    currency,
    createdAt: ctx.clock.now(),
    updatedAt: ctx.clock.now(),
  });
  return { url: session.url, sessionId: session.id };
}

/**
 * A webhook delivery: the signature is checked by Stripe's library over the raw body (and
 * its timestamp against our clock); then the event is applied once per event id, in one
 * transaction with its ledger entry. An event about a payment we do not know yet (a refund
 * before its checkout completed) answers 503, so Stripe delivers it again later.
 */
export async function handleStripeWebhook(ctx: Ctx, rawBody: Buffer, signature: string | undefined) {
  if (!ctx.stripe || !ctx.config.stripeWebhookSecret) {
    throw new AppError("not_found", "card payments are not configured");
  }
  let event: Stripe.Event;
  try {
    event = ctx.stripe.webhooks.constructEvent(
      rawBody,
      signature ?? "",
      ctx.config.stripeWebhookSecret,
      undefined,
      undefined,
      ctx.clock.now().getTime(),
    );
  } catch (err) {
    throw new AppError("bad_request", "webhook signature verification failed", undefined, { cause: err });
  }
  const now = ctx.clock.now();
  const outcome = await ctx.db.transaction(async (tx): Promise<Outcome> => {
    const [fresh] = await tx
      .insert(stripeEvents)
      .values({ id: event.id, type: event.type, receivedAt: now })
      .onConflictDoNothing()
      .returning();
    if (!fresh) return null; // a replay
    switch (event.type) {
      // Delayed payment methods (bank debits) complete Checkout unpaid and are paid, or fail,
      // later: https://docs.stripe.com/checkout/fulfillment. Either paid event credits the
      // session once (its ledger key), whichever comes first.
      case "checkout.session.completed":
      case "checkout.session.async_payment_succeeded":
        return creditCheckout(tx, event.data.object, event.id, now);
      case "checkout.session.async_payment_failed":
        return failCheckout(tx, event.data.object, now);
      case "checkout.session.expired":
        return expireCheckout(tx, event.data.object, now);
      case "charge.refunded":
        return debitRefund(tx, event.data.object, event.id, now);
      case "charge.dispute.created":
        return debitDispute(tx, event.data.object, event.id, now);
      default:
        return null;
    }
  });
  if (outcome?.balance !== undefined) await reactToBalance(ctx, outcome.userId, outcome.balance);
  if (outcome?.failed) await notifyFailed(ctx, outcome.userId, outcome.failed);
  if (outcome?.topUp) await publishTopUp(ctx, outcome.userId, outcome.topUp);
  return { received: true };
}

/**
 * What an event changed: the owner's balance (when it moved), a failed top-up to tell them
 * about, the top-up whose status changed (for the Billing page's `topup` event).
 */
type Outcome = { userId: string; balance?: number; failed?: FailedTopUp; topUp?: string } | null;

/** Why nothing was credited, as the Billing page shows it. */
const FAILED_REASON =
  "the payment failed after checkout (the bank declined or returned the debit); nothing was credited";
const EXPIRED_REASON = "the checkout page expired before a payment was made; nothing was credited";

/** A session this control plane made, for the account it names, locked; else null. */
async function ourSession(tx: Db, session: Stripe.Checkout.Session) {
  const [topUp] = await tx.select().from(topUps).where(eq(topUps.sessionId, session.id)).for("update");
  if (!topUp || session.client_reference_id !== topUp.userId) return null;
  return topUp;
}

/**
 * A delayed payment failed: nothing is credited, the top-up is recorded as failed (unless a
 * paid event already credited it: Stripe sends one outcome per session) and its owner told.
 */
async function failCheckout(tx: Db, session: Stripe.Checkout.Session, at: Date): Promise<Outcome> {
  const topUp = await ourSession(tx, session);
  if (!topUp) return null;
  const [failed] = await tx
    .update(topUps)
    .set({
      status: "failed",
      failureReason: FAILED_REASON,
      paymentIntent: idOf(session.payment_intent) ?? topUp.paymentIntent,
      updatedAt: at,
    })
    .where(and(eq(topUps.sessionId, session.id), inArray(topUps.status, ["open", "processing"])))
    .returning();
  if (!failed) return null;
  return {
    userId: topUp.userId,
    failed: { sessionId: topUp.sessionId, amount: topUp.amount, currency: topUp.currency },
    topUp: topUp.sessionId,
  };
}

/**
 * A Checkout Session expired unpaid (the customer left; Stripe expires it after 24 h):
 * recorded, nothing credited, nobody mailed (they chose not to pay). Only an open session
 * expires: https://docs.stripe.com/api/checkout/sessions/expire.
 */
async function expireCheckout(tx: Db, session: Stripe.Checkout.Session, at: Date): Promise<Outcome> {
  const topUp = await ourSession(tx, session);
  if (!topUp) return null;
  const [expired] = await tx
    .update(topUps)
    .set({ status: "expired", failureReason: EXPIRED_REASON, updatedAt: at })
    .where(and(eq(topUps.sessionId, session.id), eq(topUps.status, "open")))
    .returning();
  return expired ? { userId: topUp.userId, topUp: topUp.sessionId } : null;
}

async function notifyFailed(ctx: Ctx, userId: string, failed: FailedTopUp): Promise<void> {
  ctx.log.warn({ user: userId, ...failed }, "top-up payment failed; nothing credited");
  const [user] = await ctx.db
    .select({ id: users.id, email: users.email })
    .from(users)
    .where(eq(users.id, userId));
  if (!user) return;
  await ctx.walletNotifier
    .topUpFailed(user, failed)
    .catch((err: unknown) => ctx.log.error({ err, user: userId }, "wallet notifier failed"));
}

/**
 * Credits a paid session once. A session completed unpaid (a delayed payment method) is
 * only marked processing: its money comes, or not, with a later async_payment event.
 */
async function creditCheckout(
  tx: Db,
  session: Stripe.Checkout.Session,
  eventId: string,
  at: Date,
): Promise<Outcome> {
  // Not a session this control plane made for this user: nothing to credit.
  const topUp = await ourSession(tx, session);
  if (!topUp || (session.currency ?? "").toUpperCase() !== topUp.currency) return null;
  if (session.payment_status !== "paid" || session.amount_total === null) {
    if (session.payment_status === "unpaid" && session.status === "complete") {
      const [processing] = await tx
        .update(topUps)
        .set({ status: "processing", paymentIntent: idOf(session.payment_intent), updatedAt: at })
        .where(and(eq(topUps.sessionId, session.id), eq(topUps.status, "open")))
        .returning();
      if (processing) return { userId: topUp.userId, topUp: topUp.sessionId };
    }
    return null;
  }
  await tx
    .update(topUps)
    .set({ status: "paid", failureReason: null, paymentIntent: idOf(session.payment_intent), updatedAt: at })
    .where(eq(topUps.sessionId, session.id));
  const result = await appendEntry(tx, {
    userId: topUp.userId,
    kind: "topup",
    amount: session.amount_total,
    key: `topup:${session.id}`,
    at,
    memo: `card top-up (${eventId})`,
  });
  return result ? { userId: topUp.userId, balance: result.balance, topUp: topUp.sessionId } : null;
}

async function topUpForPayment(tx: Db, paymentIntent: string | null) {
  const [topUp] = paymentIntent
    ? await tx.select().from(topUps).where(eq(topUps.paymentIntent, paymentIntent)).for("update")
    : [];
  if (!topUp) {
    throw new AppError("unavailable", "this payment is not known yet; deliver the event again later");
  }
  return topUp;
}

/** `amount_refunded` is cumulative: debit what it adds to the refunds already taken back. */
async function debitRefund(tx: Db, charge: Stripe.Charge, eventId: string, at: Date): Promise<Outcome> {
  const topUp = await topUpForPayment(tx, idOf(charge.payment_intent));
  const prefix = `refund:${charge.id}:`;
  const [done] = await tx
    .select({ total: sql<string>`coalesce(-sum(${ledgerEntries.amount}), 0)::text` })
    .from(ledgerEntries)
    .where(like(ledgerEntries.key, `${prefix}%`));
  const due = charge.amount_refunded - Number(done?.total ?? 0);
  if (due <= 0) return null; // an older, smaller refund event arriving late
  const result = await appendEntry(tx, {
    userId: topUp.userId,
    kind: "refund",
    amount: -due,
    key: `${prefix}${charge.amount_refunded}`,
    at,
    memo: `card payment refunded (${eventId})`,
  });
  if (!result) return null;
  await takenBack(tx, topUp.sessionId, due, at);
  return { userId: topUp.userId, balance: result.balance, topUp: topUp.sessionId };
}

async function debitDispute(tx: Db, dispute: Stripe.Dispute, eventId: string, at: Date): Promise<Outcome> {
  const topUp = await topUpForPayment(tx, idOf(dispute.payment_intent));
  const result = await appendEntry(tx, {
    userId: topUp.userId,
    kind: "dispute",
    amount: -dispute.amount,
    key: `dispute:${dispute.id}`,
    at,
    memo: `card payment disputed (${eventId})`,
  });
  if (!result) return null;
  await takenBack(tx, topUp.sessionId, dispute.amount, at);
  return { userId: topUp.userId, balance: result.balance, topUp: topUp.sessionId };
}

/** Adds what a refund or dispute took back to its top-up; all of it taken back is `refunded`. */
async function takenBack(tx: Db, sessionId: string, amount: number, at: Date): Promise<void> {
  await tx
    .update(topUps)
    .set({
      refunded: sql`${topUps.refunded} + ${amount}`,
      status: sql`CASE WHEN ${topUps.refunded} + ${amount} >= ${topUps.amount} THEN 'refunded' ELSE ${topUps.status} END`,
      updatedAt: at,
    })
    .where(eq(topUps.sessionId, sessionId));
}

/** The owner's recent top-ups, newest first, as the Billing page lists them. */
export async function listTopUps(ctx: Ctx, userId: string, limit = 20): Promise<TopUp[]> {
  const rows = await ctx.db
    .select()
    .from(topUps)
    .where(eq(topUps.userId, userId))
    .orderBy(desc(topUps.createdAt))
    .limit(limit);
  return rows.map(toTopUp);
}

const toTopUp = (t: typeof topUps.$inferSelect): TopUp => ({
  sessionId: t.sessionId,
  amount: t.amount,
  currency: t.currency,
  status: t.status,
  failureReason: t.failureReason,
  refunded: t.refunded,
  createdAt: t.createdAt.toISOString(),
  updatedAt: (t.updatedAt ?? t.createdAt).toISOString(),
});

/** The `topup` event to the owner's streams (the stream sends it to the owner alone). */
async function publishTopUp(ctx: Ctx, userId: string, sessionId: string): Promise<void> {
  const [row] = await ctx.db.select().from(topUps).where(eq(topUps.sessionId, sessionId));
  if (!row) return;
  const teams = await ctx.db
    .select({ teamId: teamMembers.teamId })
    .from(teamMembers)
    .where(eq(teamMembers.userId, userId));
  for (const t of teams) ctx.bus.publish(t.teamId, { type: "topup", userId, topUp: toTopUp(row) });
}
