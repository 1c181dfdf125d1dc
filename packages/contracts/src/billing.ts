import { z } from "zod";
import { BOX_STATUSES, BoxSize, type BoxStatus } from "./box.ts";

/**
 * Money is an integer number of minor units (cents) of the one configured currency, never a
 * float: sums of floats drift, and a wallet must equal the sum of its ledger to the cent.
 * JSON carries them as numbers; the bound keeps every value a safe integer in JavaScript.
 */
export const MONEY_MAX = 1_000_000_000_000;
export const Money = z.number().int().min(-MONEY_MAX).max(MONEY_MAX);
export const PositiveMoney = z.number().int().min(1).max(MONEY_MAX);

/** What a ledger row records. Credits are positive, debits negative. */
export const LEDGER_KINDS = [
  "trial", // credit granted once per verified account (and email address), at verification
  "trial_expiry", // debit of what is left of the trial credit at its expiry
  "topup", // credit from a verified Stripe Checkout payment
  "adjustment", // credit or debit by an administrator
  "usage", // debit of one settled metering period of one box
  "refund", // debit back of a refunded card payment
  "dispute", // debit back of a disputed card payment
] as const;
export type LedgerKind = (typeof LEDGER_KINDS)[number];

/**
 * Where a card top-up stands: `open` (Checkout Session made, not paid), `processing` (the
 * customer finished Checkout with a delayed payment method; no money yet), `paid` (credited),
 * `failed` (the delayed payment failed; nothing credited), `expired` (the Checkout Session
 * expired unpaid; nothing credited), `refunded` (paid, then all of it taken back by refunds
 * or disputes).
 */
export const TOP_UP_STATUSES = ["open", "processing", "paid", "failed", "expired", "refunded"] as const;
export type TopUpStatus = (typeof TOP_UP_STATUSES)[number];

/** Statuses in which a box's VM runs (compute is billed) and in which its disk exists (storage). */
const COMPUTE: readonly BoxStatus[] = ["starting", "running", "stopping", "resetting", "hibernating"];
export function billedMeters(status: BoxStatus): { compute: boolean; storage: boolean } {
  return { compute: COMPUTE.includes(status), storage: status !== "deleted" };
}

/** A GB-month, as storage is priced: 30 days. */
export const MS_PER_HOUR = 3_600_000;
export const MS_PER_STORAGE_MONTH = 30 * 24 * MS_PER_HOUR;

export const Price = z.object({
  size: BoxSize,
  /** Minor units per hour the box runs. */
  computePerHour: Money,
  /** Minor units per GB of disk per 30 days, whatever the box's state. */
  storagePerGbMonth: Money,
  effectiveFrom: z.string(),
});
export type Price = z.infer<typeof Price>;
export const PriceList = z.object({
  currency: z.string(),
  /** The prices in force now, one per size. */
  current: z.array(Price),
  /** Every version, newest first (past usage keeps the price of its time). */
  history: z.array(Price),
});
export const SetPriceRequest = z.strictObject({
  size: BoxSize,
  computePerHour: Money.pipe(z.number().min(0)),
  storagePerGbMonth: Money.pipe(z.number().min(0)),
  /** ISO 8601, not in the past; default now. */
  effectiveFrom: z
    .string()
    .max(40, { abort: true })
    .pipe(z.iso.datetime({ offset: true }))
    .optional(),
});
export type SetPriceRequest = z.infer<typeof SetPriceRequest>;

export const LedgerEntry = z.object({
  seq: z.number().int(),
  kind: z.enum(LEDGER_KINDS),
  amount: Money,
  at: z.string(),
  box: z.string().nullable(),
  periodStart: z.string().nullable(),
  periodEnd: z.string().nullable(),
  expiresAt: z.string().nullable(),
  memo: z.string().nullable(),
});
export type LedgerEntry = z.infer<typeof LedgerEntry>;
export const LedgerQuery = z.object({
  kind: z.enum(LEDGER_KINDS).optional(),
  /** Entries with a seq below this one (paging back). */
  before: z.coerce.number().int().positive().optional(),
  limit: z.coerce.number().int().min(1).max(500).default(100),
});
export const LedgerPage = z.object({ entries: z.array(LedgerEntry) });

export const BoxCost = z.object({
  slug: z.string(),
  size: BoxSize,
  status: z.enum(BOX_STATUSES),
  /** Settled so far this calendar month (UTC), in minor units. */
  compute: Money,
  storage: Money,
  computeMs: z.number().int(),
  /** Minor units per hour at its current state and price. */
  ratePerHour: Money,
});
export type BoxCost = z.infer<typeof BoxCost>;

export const Wallet = z.object({
  currency: z.string(),
  balance: Money,
  /** Below this the owner is warned; at zero running boxes stop. */
  lowBalanceThreshold: Money,
  low: z.boolean(),
  /** Minor units per hour all the owner's boxes cost in their current states. */
  burnRatePerHour: Money,
  /** Hours left at that rate; null when nothing burns. */
  hoursLeft: z.number().nullable(),
  /** Whether card top-ups are configured (Stripe keys). */
  cardTopUps: z.boolean(),
  boxes: z.array(BoxCost),
});
export type Wallet = z.infer<typeof Wallet>;

/** The realtime `wallet` event: the balance crossed the warning threshold or reached zero. */
export const WalletEvent = z.object({
  balance: Money,
  state: z.enum(["low", "empty"]),
  message: z.string(),
});
export type WalletEvent = z.infer<typeof WalletEvent>;

export const TopUpRequest = z.strictObject({ amount: PositiveMoney });

/** One of the owner's card top-ups as the Billing page lists it. */
export const TopUp = z.object({
  sessionId: z.string(),
  amount: Money,
  currency: z.string(),
  status: z.enum(TOP_UP_STATUSES),
  /** Why nothing was credited (`failed`, `expired`); null otherwise. */
  failureReason: z.string().nullable(),
  /** Minor units taken back by refunds and disputes of this payment (0 when none). */
  refunded: Money,
  createdAt: z.string(),
  updatedAt: z.string(),
});
export type TopUp = z.infer<typeof TopUp>;
export const TopUpList = z.object({ topUps: z.array(TopUp) });
export const TopUpSession = z.object({ url: z.string(), sessionId: z.string() });

export const AdjustmentRequest = z.strictObject({
  email: z.string().max(254),
  amount: Money.refine((n) => n !== 0, "amount must not be zero"),
  memo: z.string().trim().min(1).max(200),
});

export const InvoiceLine = z.object({
  box: z.string().nullable(),
  description: z.string(),
  /** Compute hours (thousandths) or storage GB-months (thousandths), as integers. */
  quantityMilli: z.number().int(),
  unit: z.enum(["hours", "GB-months", "credit"]),
  amount: Money,
});
export const Invoice = z.object({
  id: z.string(),
  month: z.string(),
  currency: z.string(),
  issuedAt: z.string(),
  /** What was charged for usage (positive). */
  usageTotal: Money,
  /** Credits received in the month (trial, top-ups, adjustments; refunds negative). */
  creditsTotal: Money,
  lines: z.array(InvoiceLine),
});
export type Invoice = z.infer<typeof Invoice>;
export const InvoiceList = z.object({ invoices: z.array(Invoice) });
export const InvoiceParams = z.object({ id: z.string().max(64) });

/** Formats minor units for people: 1234 → "12.34 EUR". Integer arithmetic only. */
export function formatMoney(minor: number, currency: string): string {
  const sign = minor < 0 ? "-" : "";
  const abs = Math.abs(minor);
  const units = Math.trunc(abs / 100);
  const cents = String(abs % 100).padStart(2, "0");
  return `${sign}${units}.${cents} ${currency}`;
}
