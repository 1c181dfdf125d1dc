import { and, desc, eq } from "drizzle-orm";
import type { Ctx } from "../context.ts";
import { boxes } from "../db/schema.ts";
import { reactToBalance, reactToBoxChange } from "./funds.ts";
import { issueInvoices } from "./invoices.ts";
import { inconsistentWallets } from "./ledger.ts";
import { boxesToSettle, settleBox } from "./settle.ts";
import { expireTrials } from "./trial.ts";

/** Settles one box, then warns or stops its owner's boxes if the balance calls for it. */
async function settleAndReact(ctx: Ctx, boxId: string): Promise<void> {
  const settled = await settleBox(ctx, boxId);
  if (settled && settled.balance !== null) await reactToBalance(ctx, settled.userId, settled.balance);
}

/**
 * One billing pass: every box that may owe usage is settled up to now, expired trials are
 * taken back, and the balance cache is checked against the ledger (a mismatch is logged as
 * an error: it means something wrote around appendEntry).
 */
export async function runBilling(ctx: Ctx): Promise<{ boxes: number; inconsistent: number }> {
  const ids = await boxesToSettle(ctx.db);
  for (const id of ids) await settleAndReact(ctx, id);
  for (const moved of await expireTrials(ctx)) await reactToBalance(ctx, moved.userId, moved.balance);
  await issueInvoices(ctx);
  const bad = await inconsistentWallets(ctx.db);
  for (const w of bad) ctx.log.error(w, "wallet balance differs from its ledger");
  return { boxes: ids.length, inconsistent: bad.length };
}

/**
 * Runs billing every `settleIntervalMs` and settles a box at each of its state changes.
 * Returns the stop function.
 */
export function startBilling(ctx: Ctx): () => void {
  let running = false;
  const tick = () => {
    if (running) return;
    running = true;
    // One replica at a time (settling is idempotent anyway; this saves the others the work).
    ctx.tasks
      .run("billing", () => runBilling(ctx))
      .catch((err: unknown) => ctx.log.error({ err }, "billing pass failed"))
      .finally(() => {
        running = false;
      });
  };
  const timer = setInterval(tick, ctx.config.settleIntervalMs);
  timer.unref();
  const off = ctx.bus.onBoxChange((teamId, slug) => {
    void (async () => {
      const [box] = await ctx.db
        .select({ id: boxes.id, ownerId: boxes.ownerId, status: boxes.status })
        .from(boxes)
        .where(and(eq(boxes.teamId, teamId), eq(boxes.slug, slug)))
        .orderBy(desc(boxes.createdAt))
        .limit(1);
      if (!box) return;
      await settleAndReact(ctx, box.id);
      await reactToBoxChange(ctx, box.ownerId, box.status);
    })().catch((err: unknown) => ctx.log.error({ err, slug }, "settlement at state change failed"));
  });
  return () => {
    clearInterval(timer);
    off();
  };
}
