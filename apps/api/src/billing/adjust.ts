import type { LedgerEntry } from "@doppio/contracts";
import { eq } from "drizzle-orm";
import { newId } from "../auth/secrets.ts";
import type { Ctx } from "../context.ts";
import { users } from "../db/schema.ts";
import { notFound } from "../errors.ts";
import { audit } from "../services/audit.ts";
import type { Principal } from "../services/users.ts";
import { reactToBalance } from "./funds.ts";
import { appendEntry, toLedgerEntry } from "./ledger.ts";

/** An administrator's credit or debit of a user's wallet (how wallets are topped up without Stripe). */
export async function adjustWallet(
  ctx: Ctx,
  admin: Principal,
  req: { email: string; amount: number; memo: string },
): Promise<LedgerEntry> {
  const [user] = await ctx.db
    .select({ id: users.id })
    .from(users)
    .where(eq(users.email, req.email.toLowerCase()));
  if (!user) throw notFound("user");
  const at = ctx.clock.now();
  const result = await ctx.db.transaction(async (tx) => {
    const appended = await appendEntry(tx, {
      userId: user.id,
      kind: "adjustment",
      amount: req.amount,
      key: `adjustment:${newId()}`,
      at,
      memo: req.memo,
    });
    await audit(ctx, tx, {
      user: admin.userId,
      action: "billing.adjust",
      targetType: "wallet",
      targetId: user.id,
      data: { amount: req.amount, memo: req.memo },
    });
    return appended!;
  });
  await reactToBalance(ctx, user.id, result.balance);
  return toLedgerEntry(result.entry, null);
}
