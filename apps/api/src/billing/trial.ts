import { and, eq, lt, lte, sql } from "drizzle-orm";
import type { Ctx } from "../context.ts";
import type { Db } from "../db/client.ts";
import { ledgerEntries, trialGrants } from "../db/schema.ts";
import { appendEntry, balanceOf } from "./ledger.ts";

const DAY_MS = 86_400_000;

/**
 * The address a trial is counted against: lower-cased, with a `+tag` dropped from the local
 * part, so `Ann+2@Example.com` is `ann@example.com`. (Provider-specific aliases, such as
 * Gmail's ignored dots, are not folded.) drizzle/0019_email_verification_backfill.sql
 * computes the same key in SQL.
 */
function trialEmailKey(email: string): string {
  const at = email.lastIndexOf("@");
  const local = email.slice(0, at).toLowerCase().replace(/\+.*$/, "");
  return `${local}@${email.slice(at + 1).toLowerCase()}`;
}

/**
 * The trial credit, in the transaction that makes the account verified. Once per account
 * and once per address ever: the `trial_grants` row (primary key the address's key, unique
 * account) is claimed first, so of two racing grants one inserts and the other, waiting on
 * the first's uniqueness check, inserts nothing and grants nothing; the ledger key
 * `trial:<account>` holds the same line. Returns the credit granted and the new balance
 * (0 and null when none).
 */
export async function grantTrial(
  ctx: Ctx,
  tx: Db,
  user: { id: string; email: string },
): Promise<{ amount: number; balance: number | null }> {
  if (ctx.config.trialCredit <= 0) return { amount: 0, balance: null };
  const at = ctx.clock.now();
  const [claimed] = await tx
    .insert(trialGrants)
    .values({ emailKey: trialEmailKey(user.email), userId: user.id, grantedAt: at })
    .onConflictDoNothing()
    .returning();
  if (!claimed) return { amount: 0, balance: null };
  const result = await appendEntry(tx, {
    userId: user.id,
    kind: "trial",
    amount: ctx.config.trialCredit,
    key: `trial:${user.id}`,
    at,
    expiresAt: new Date(at.getTime() + ctx.config.trialDays * DAY_MS),
    memo: "trial credit",
  });
  return result ? { amount: ctx.config.trialCredit, balance: result.balance } : { amount: 0, balance: null };
}

/**
 * Expired trials: what is left of the credit (the trial minus what was spent, never more
 * than the balance, so top-ups are never taken) is taken back by a `trial_expiry` entry, once per account. Returns the users
 * whose balance moved.
 */
export async function expireTrials(ctx: Ctx): Promise<Array<{ userId: string; balance: number }>> {
  const now = ctx.clock.now();
  const due = await ctx.db
    .select()
    .from(ledgerEntries)
    .where(
      and(
        eq(ledgerEntries.kind, "trial"),
        lte(ledgerEntries.expiresAt, now),
        sql`NOT EXISTS (SELECT 1 FROM ${ledgerEntries} e WHERE e.key = 'trial_expiry:' || ${ledgerEntries.userId})`,
      ),
    );
  const moved: Array<{ userId: string; balance: number }> = [];
  for (const trial of due) {
    const result = await ctx.db.transaction(async (tx) => {
      // Spending uses the trial first: what is left of it is the trial minus every debit so far.
      const [spent] = await tx
        .select({ total: sql<string>`coalesce(-sum(${ledgerEntries.amount}), 0)::text` })
        .from(ledgerEntries)
        .where(and(eq(ledgerEntries.userId, trial.userId), lt(ledgerEntries.amount, 0)));
      const balance = await balanceOf(tx, trial.userId);
      const left = Math.max(0, Math.min(trial.amount - Number(spent?.total ?? 0), balance));
      return appendEntry(tx, {
        userId: trial.userId,
        kind: "trial_expiry",
        amount: -left,
        key: `trial_expiry:${trial.userId}`,
        at: now,
        memo: "unused trial credit expired",
      });
    });
    if (result) moved.push({ userId: trial.userId, balance: result.balance });
  }
  return moved;
}
