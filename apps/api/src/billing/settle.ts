import { type BoxStatus, MONEY_MAX } from "@doppio/contracts";
import { and, asc, desc, eq, isNull, or, sql } from "drizzle-orm";
import type { Ctx } from "../context.ts";
import type { Db } from "../db/client.ts";
import { boxes, boxStatusHistory, usageSettlements } from "../db/schema.ts";
import { appendEntry } from "./ledger.ts";
import { type Carry, meter } from "./metering.ts";
import { priceVersions } from "./prices.ts";

export interface Settled {
  userId: string;
  periods: number;
  charged: number;
  balance: number | null;
}

/**
 * Settles one box's usage from where its last settlement ended up to `now` (or its deletion):
 * settlement rows and ledger debits in one transaction, the box row locked so two settlements
 * of one box take turns. The next one starts where this one ended, and `(box, period_start)`
 * is a primary key, so running it twice, or after a restart, debits each moment once.
 */
export async function settleBox(
  ctx: Ctx,
  boxId: string,
  now: Date = ctx.clock.now(),
): Promise<Settled | null> {
  return ctx.db.transaction(async (tx) => {
    const [box] = await tx.select().from(boxes).where(eq(boxes.id, boxId)).for("update");
    if (!box) return null;
    const history = await tx
      .select()
      .from(boxStatusHistory)
      .where(eq(boxStatusHistory.boxId, boxId))
      .orderBy(asc(boxStatusHistory.at), asc(boxStatusHistory.seq));
    if (history.length === 0) return null;
    const [last] = await tx
      .select()
      .from(usageSettlements)
      .where(eq(usageSettlements.boxId, boxId))
      .orderBy(desc(usageSettlements.periodEnd))
      .limit(1);
    const from = last?.periodEnd ?? history[0]!.at;
    const deleted = history.find((h) => h.status === "deleted");
    const to = deleted && deleted.at < now ? deleted.at : now;
    const carry: Carry = {
      compute: BigInt(last?.computeCarry ?? 0),
      storage: BigInt(last?.storageCarry ?? 0),
    };
    const periods = meter(
      history.map((h) => ({ status: h.status as BoxStatus, diskGb: h.diskGb, at: h.at })),
      await priceVersions(tx, box.size),
      from,
      to,
      carry,
    );
    let charged = 0;
    let balance: number | null = null;
    for (const p of periods) {
      await tx.insert(usageSettlements).values({
        boxId,
        periodStart: p.start,
        periodEnd: p.end,
        userId: box.ownerId,
        computeMs: p.computeMs,
        storageGbMs: p.storageGbMs,
        computeAmount: p.computeAmount,
        storageAmount: p.storageAmount,
        computeCarry: Number(p.carry.compute),
        storageCarry: Number(p.carry.storage),
      });
      const amount = Math.min(p.computeAmount + p.storageAmount, MONEY_MAX);
      if (amount === 0) continue;
      const appended = await appendEntry(tx, {
        userId: box.ownerId,
        kind: "usage",
        amount: -amount,
        key: `usage:${boxId}:${p.start.toISOString()}`,
        at: now,
        boxId,
        periodStart: p.start,
        periodEnd: p.end,
      });
      if (appended) {
        charged += amount;
        balance = appended.balance;
      }
    }
    return { userId: box.ownerId, periods: periods.length, charged, balance };
  });
}

/** Boxes that may still owe usage: live ones, and deleted ones not settled up to their deletion. */
export async function boxesToSettle(db: Db): Promise<string[]> {
  const rows = await db
    .select({ id: boxes.id })
    .from(boxes)
    .where(
      or(
        isNull(boxes.deletedAt),
        sql`NOT EXISTS (SELECT 1 FROM ${usageSettlements} s WHERE s.box_id = ${boxes.id} AND s.period_end >= ${boxes.deletedAt})`,
      ),
    );
  return rows.map((r) => r.id);
}

/** Settled usage per box of a user for a month, for the wallet view and invoices. */
export async function usageByBox(db: Db, userId: string, monthStart: Date, monthEnd: Date) {
  return db
    .select({
      boxId: usageSettlements.boxId,
      computeMs: sql<string>`sum(${usageSettlements.computeMs})::text`,
      storageGbMs: sql<string>`sum(${usageSettlements.storageGbMs})::text`,
      compute: sql<string>`sum(${usageSettlements.computeAmount})::text`,
      storage: sql<string>`sum(${usageSettlements.storageAmount})::text`,
    })
    .from(usageSettlements)
    .where(
      and(
        eq(usageSettlements.userId, userId),
        sql`${usageSettlements.periodStart} >= ${monthStart}`,
        sql`${usageSettlements.periodStart} < ${monthEnd}`,
      ),
    )
    .groupBy(usageSettlements.boxId);
}
