import { BOX_SIZES, type BoxSizeName, type Price, type SetPriceRequest } from "@doppio/contracts";
import { asc, desc, eq } from "drizzle-orm";
import { newId } from "../auth/secrets.ts";
import type { Ctx } from "../context.ts";
import type { Db } from "../db/client.ts";
import { prices } from "../db/schema.ts";
import { AppError } from "../errors.ts";
import { audit } from "../services/audit.ts";
import { isUniqueViolation, type Principal } from "../services/users.ts";
import type { PriceVersion } from "./metering.ts";

type PriceRow = typeof prices.$inferSelect;

/** Prices a fresh control plane starts with (minor units); admins add versions from there. */
const DEFAULT_PRICES: Record<BoxSizeName, { computePerHour: number; storagePerGbMonth: number }> = {
  small: { computePerHour: 4, storagePerGbMonth: 10 },
  medium: { computePerHour: 8, storagePerGbMonth: 10 },
  large: { computePerHour: 16, storagePerGbMonth: 10 },
};

/** Inserts the default price of each size that has none yet, effective since the epoch. */
export async function seedPrices(ctx: Ctx): Promise<void> {
  for (const size of Object.keys(BOX_SIZES) as BoxSizeName[]) {
    const [any] = await ctx.db.select().from(prices).where(eq(prices.size, size)).limit(1);
    if (any) continue;
    await ctx.db
      .insert(prices)
      .values({ id: newId(), size, ...DEFAULT_PRICES[size], effectiveFrom: new Date(0) })
      .onConflictDoNothing();
  }
}

/** Every version of a size's price, oldest first (what metering reads). */
export async function priceVersions(db: Db, size: string): Promise<PriceVersion[]> {
  return db
    .select({
      computePerHour: prices.computePerHour,
      storagePerGbMonth: prices.storagePerGbMonth,
      effectiveFrom: prices.effectiveFrom,
    })
    .from(prices)
    .where(eq(prices.size, size as BoxSizeName))
    .orderBy(asc(prices.effectiveFrom));
}

const toPrice = (r: PriceRow): Price => ({
  size: r.size,
  computePerHour: r.computePerHour,
  storagePerGbMonth: r.storagePerGbMonth,
  effectiveFrom: r.effectiveFrom.toISOString(),
});

export async function listPrices(
  ctx: Ctx,
): Promise<{ currency: string; current: Price[]; history: Price[] }> {
  const rows = await ctx.db.select().from(prices).orderBy(desc(prices.effectiveFrom));
  const now = ctx.clock.now().getTime();
  const current: Price[] = [];
  for (const size of Object.keys(BOX_SIZES) as BoxSizeName[]) {
    const row = rows.find((r) => r.size === size && r.effectiveFrom.getTime() <= now);
    if (row) current.push(toPrice(row));
  }
  return { currency: ctx.config.currency, current, history: rows.map(toPrice) };
}

/** A new price version; it cannot start in the past, so usage already metered keeps its price. */
export async function setPrice(ctx: Ctx, p: Principal, req: SetPriceRequest): Promise<Price> {
  const now = ctx.clock.now();
  const effectiveFrom = req.effectiveFrom ? new Date(req.effectiveFrom) : now;
  if (effectiveFrom.getTime() < now.getTime() - 1000) {
    throw new AppError("validation_failed", "a price cannot take effect in the past", {
      field: "effectiveFrom",
    });
  }
  try {
    const [row] = await ctx.db
      .insert(prices)
      .values({
        id: newId(),
        size: req.size,
        computePerHour: req.computePerHour,
        storagePerGbMonth: req.storagePerGbMonth,
        effectiveFrom,
        createdBy: p.userId,
        createdAt: now,
      })
      .returning();
    await audit(ctx, ctx.db, {
      user: p.userId,
      action: "billing.price",
      targetType: "price",
      targetId: req.size,
      data: { ...req, effectiveFrom: effectiveFrom.toISOString() },
    });
    return toPrice(row!);
  } catch (err) {
    if (isUniqueViolation(err)) throw new AppError("conflict", "a price for this size already starts then");
    throw err;
  }
}
