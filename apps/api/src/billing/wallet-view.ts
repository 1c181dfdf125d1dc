import type { BoxSizeName, BoxStatus, Wallet } from "@doppio/contracts";
import { and, eq, inArray, isNull, or } from "drizzle-orm";
import type { Ctx } from "../context.ts";
import { boxes } from "../db/schema.ts";
import { walletState } from "./funds.ts";
import { balanceOf } from "./ledger.ts";
import { nextMonthStart, type PriceVersion, ratePerHour } from "./metering.ts";
import { priceVersions } from "./prices.ts";
import { usageByBox } from "./settle.ts";

export function monthStartOf(t: Date): Date {
  return new Date(Date.UTC(t.getUTCFullYear(), t.getUTCMonth(), 1));
}

function current(versions: PriceVersion[], now: Date): PriceVersion | undefined {
  return versions.filter((v) => v.effectiveFrom.getTime() <= now.getTime()).at(-1);
}

/** The owner's wallet as the dashboard and `doppio wallet` show it. */
export async function walletView(ctx: Ctx, userId: string): Promise<Wallet> {
  const now = ctx.clock.now();
  const balance = await balanceOf(ctx.db, userId);
  const start = monthStartOf(now);
  const usage = await usageByBox(ctx.db, userId, start, nextMonthStart(now));
  const used = new Map(usage.map((u) => [u.boxId, u]));
  const rows = await ctx.db
    .select()
    .from(boxes)
    .where(
      and(
        eq(boxes.ownerId, userId),
        or(isNull(boxes.deletedAt), usage.length ? inArray(boxes.id, [...used.keys()]) : undefined),
      ),
    );
  const priceBySize = new Map<string, PriceVersion | undefined>();
  let burn = 0;
  const costs = [];
  for (const box of rows) {
    if (!priceBySize.has(box.size))
      priceBySize.set(box.size, current(await priceVersions(ctx.db, box.size), now));
    const rate = box.deletedAt
      ? 0
      : ratePerHour(box.status as BoxStatus, box.diskGb, priceBySize.get(box.size));
    burn += rate;
    const u = used.get(box.id);
    costs.push({
      slug: box.slug,
      size: box.size as BoxSizeName,
      status: box.status,
      compute: Number(u?.compute ?? 0),
      storage: Number(u?.storage ?? 0),
      computeMs: Number(u?.computeMs ?? 0),
      ratePerHour: rate,
    });
  }
  const state = walletState(ctx, balance);
  return {
    currency: ctx.config.currency,
    balance,
    lowBalanceThreshold: ctx.config.lowBalanceThreshold,
    low: state !== null,
    burnRatePerHour: burn,
    hoursLeft: burn > 0 ? Math.max(0, Math.floor((balance / burn) * 10) / 10) : null,
    cardTopUps: ctx.stripe !== null,
    boxes: costs,
  };
}
