import { and, eq, lt, lte, sql } from "drizzle-orm";
import type { Ctx } from "../context.ts";
import type { Db } from "../db/client.ts";
import { ledgerEntries } from "../db/schema.ts";
import { appendEntry, balanceOf } from "./ledger.ts";

const DAY_MS = 86_400_000;

/**
 * The trial credit, in the signup's transaction. Its key is the account's, so an account gets
 * it once whatever retries; the entry says when what is left of it expires.
 */
export async function grantTrial(ctx: Ctx, tx: Db, userId: string): Promise<void> {
  if (ctx.config.trialCredit <= 0) return;
  const at = ctx.clock.now();
  await appendEntry(tx, {
    userId,
    kind: "trial",
    amount: ctx.config.trialCredit,
    key: `trial:${userId}`,
    at,
    expiresAt: new Date(at.getTime() + ctx.config.trialDays * DAY_MS),
    memo: "trial credit",
  });
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
