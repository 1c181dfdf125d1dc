import { type BoxStatus, billedMeters, MS_PER_HOUR, MS_PER_STORAGE_MONTH } from "@doppio/contracts";

/** A status the box entered at `at` (box_status_history), with its disk at that time. */
export interface StatusChange {
  status: BoxStatus;
  diskGb: number;
  at: Date;
}
/** A price version of the box's size. */
export interface PriceVersion {
  computePerHour: number;
  storagePerGbMonth: number;
  effectiveFrom: Date;
}
/** Sub-cent remainders carried from one period to the next, in minor units × MS_PER_STORAGE_MONTH. */
export interface Carry {
  compute: bigint;
  storage: bigint;
}
/** One settled period: what was used and what it costs, in whole minor units. */
export interface MeteredPeriod {
  start: Date;
  end: Date;
  computeMs: number;
  storageGbMs: number;
  computeAmount: number;
  storageAmount: number;
  carry: Carry;
}

const D = BigInt(MS_PER_STORAGE_MONTH);
const HOURS_PER_STORAGE_MONTH = BigInt(MS_PER_STORAGE_MONTH / MS_PER_HOUR);

/** The first instant of the UTC month after `t`. */
export function nextMonthStart(t: Date): Date {
  return new Date(Date.UTC(t.getUTCFullYear(), t.getUTCMonth() + 1, 1));
}

/** "2026-12" for any instant of December 2026 (UTC). */
function monthOf(t: Date): string {
  return `${t.getUTCFullYear()}-${String(t.getUTCMonth() + 1).padStart(2, "0")}`;
}

function lastAtOrBefore<T>(items: readonly T[], at: (x: T) => Date, t: number): T | undefined {
  let found: T | undefined;
  for (const item of items) if (at(item).getTime() <= t) found = item;
  return found;
}

/**
 * Usage of one box over `[from, to)`, one period per UTC month touched: each stretch between
 * a status change, a price change or a month boundary is priced with the status and price in
 * force at its start. All arithmetic is on integers (BigInt where products grow): an amount
 * is the floor of the exact cost plus the carried remainder, and the new remainder is carried
 * on, so however the time is cut into settlements the total equals the floor of the exact
 * total. `history` and `prices` must be sorted by time.
 */
export function meter(
  history: readonly StatusChange[],
  prices: readonly PriceVersion[],
  from: Date,
  to: Date,
  carry: Carry,
): MeteredPeriod[] {
  if (to.getTime() <= from.getTime()) return [];
  const cuts = new Set<number>([from.getTime(), to.getTime()]);
  for (let m = nextMonthStart(from); m < to; m = nextMonthStart(m)) cuts.add(m.getTime());
  for (const h of history) cuts.add(h.at.getTime());
  for (const p of prices) cuts.add(p.effectiveFrom.getTime());
  const points = [...cuts].filter((t) => t >= from.getTime() && t <= to.getTime()).sort((a, b) => a - b);

  const periods: MeteredPeriod[] = [];
  let current: (MeteredPeriod & { computeNum: bigint; storageNum: bigint }) | null = null;
  let { compute: computeCarry, storage: storageCarry } = carry;
  const close = () => {
    if (!current) return;
    const c = computeCarry + current.computeNum;
    const s = storageCarry + current.storageNum;
    computeCarry = c % D;
    storageCarry = s % D;
    periods.push({
      start: current.start,
      end: current.end,
      computeMs: current.computeMs,
      storageGbMs: current.storageGbMs,
      computeAmount: Number(c / D),
      storageAmount: Number(s / D),
      carry: { compute: computeCarry, storage: storageCarry },
    });
    current = null;
  };
  for (let i = 0; i + 1 < points.length; i++) {
    const a = points[i]!;
    const b = points[i + 1]!;
    if (current && monthOf(new Date(a)) !== monthOf(current.start)) close();
    current ??= {
      start: new Date(a),
      end: new Date(b),
      computeMs: 0,
      storageGbMs: 0,
      computeAmount: 0,
      storageAmount: 0,
      carry,
      computeNum: 0n,
      storageNum: 0n,
    };
    current.end = new Date(b);
    const state = lastAtOrBefore(history, (h) => h.at, a);
    const price = lastAtOrBefore(prices, (p) => p.effectiveFrom, a);
    if (!state || !price) continue;
    const ms = b - a;
    const meters = billedMeters(state.status);
    if (meters.compute) {
      current.computeMs += ms;
      current.computeNum += BigInt(ms) * BigInt(price.computePerHour) * HOURS_PER_STORAGE_MONTH;
    }
    if (meters.storage) {
      current.storageGbMs += ms * state.diskGb;
      current.storageNum += BigInt(ms) * BigInt(state.diskGb) * BigInt(price.storagePerGbMonth);
    }
  }
  close();
  return periods;
}

/** Minor units per hour a box costs in `status` at `price` (rounded down). */
export function ratePerHour(status: BoxStatus, diskGb: number, price: PriceVersion | undefined): number {
  if (!price) return 0;
  const meters = billedMeters(status);
  const compute = meters.compute ? price.computePerHour * Number(HOURS_PER_STORAGE_MONTH) : 0;
  const storage = meters.storage ? diskGb * price.storagePerGbMonth : 0;
  return Math.floor((compute + storage) / Number(HOURS_PER_STORAGE_MONTH));
}
