import type { LedgerEntry, LedgerKind } from "@doppio/contracts";
import { and, desc, eq, lt, sql } from "drizzle-orm";
import type { Db } from "../db/client.ts";
import { boxes, ledgerEntries, wallets } from "../db/schema.ts";

export type LedgerRow = typeof ledgerEntries.$inferSelect;

export interface NewEntry {
  userId: string;
  kind: LedgerKind;
  /** Minor units: credits positive, debits negative. */
  amount: number;
  /** Names the business event; a second append with the same key is a no-op. */
  key: string;
  at: Date;
  boxId?: string | null;
  periodStart?: Date | null;
  periodEnd?: Date | null;
  expiresAt?: Date | null;
  memo?: string | null;
}

/**
 * Appends one entry and moves the cached balance by its amount, in the caller's transaction.
 * The wallet row is changed by an atomic `balance = balance + amount` (its row lock orders
 * concurrent appends), never by writing a balance read earlier, so racing debits and
 * credits cannot lose one another. Returns null when the key was already in the ledger.
 */
export async function appendEntry(
  tx: Db,
  e: NewEntry,
): Promise<{ entry: LedgerRow; balance: number } | null> {
  if (!Number.isSafeInteger(e.amount)) throw new Error(`ledger amount must be an integer: ${e.amount}`);
  const [entry] = await tx
    .insert(ledgerEntries)
    .values({
      userId: e.userId,
      kind: e.kind,
      amount: e.amount,
      key: e.key,
      at: e.at,
      boxId: e.boxId ?? null,
      periodStart: e.periodStart ?? null,
      periodEnd: e.periodEnd ?? null,
      expiresAt: e.expiresAt ?? null,
      memo: e.memo ?? null,
    })
    .onConflictDoNothing({ target: ledgerEntries.key })
    .returning();
  if (!entry) return null;
  const [wallet] = await tx
    .insert(wallets)
    .values({ userId: e.userId, balance: e.amount, updatedAt: e.at })
    .onConflictDoUpdate({
      target: wallets.userId,
      set: { balance: sql`${wallets.balance} + ${e.amount}`, updatedAt: e.at },
    })
    .returning({ balance: wallets.balance });
  return { entry, balance: wallet!.balance };
}

/** The cached balance (0 for a user with no ledger yet). */
export async function balanceOf(db: Db, userId: string): Promise<number> {
  const [row] = await db.select({ balance: wallets.balance }).from(wallets).where(eq(wallets.userId, userId));
  return row?.balance ?? 0;
}

/**
 * Users whose cached balance differs from the sum of their ledger (none, unless something
 * wrote around appendEntry). Run by the settlement loop, which logs any it finds.
 */
export async function inconsistentWallets(
  db: Db,
): Promise<Array<{ userId: string; cached: number; ledger: number }>> {
  const sums = await db
    .select({ userId: ledgerEntries.userId, total: sql<string>`sum(${ledgerEntries.amount})::text` })
    .from(ledgerEntries)
    .groupBy(ledgerEntries.userId);
  const cached = new Map((await db.select().from(wallets)).map((w) => [w.userId, w.balance]));
  const bad: Array<{ userId: string; cached: number; ledger: number }> = [];
  for (const s of sums) {
    const ledger = Number(s.total);
    const have = cached.get(s.userId) ?? 0;
    cached.delete(s.userId);
    if (have !== ledger) bad.push({ userId: s.userId, cached: have, ledger });
  }
  for (const [userId, have] of cached) if (have !== 0) bad.push({ userId, cached: have, ledger: 0 });
  return bad;
}

export async function listLedger(
  db: Db,
  userId: string,
  q: { kind?: LedgerKind | undefined; before?: number | undefined; limit: number },
): Promise<LedgerEntry[]> {
  const rows = await db
    .select({ entry: ledgerEntries, slug: boxes.slug })
    .from(ledgerEntries)
    .leftJoin(boxes, eq(boxes.id, ledgerEntries.boxId))
    .where(
      and(
        eq(ledgerEntries.userId, userId),
        q.kind ? eq(ledgerEntries.kind, q.kind) : undefined,
        q.before ? lt(ledgerEntries.seq, q.before) : undefined,
      ),
    )
    .orderBy(desc(ledgerEntries.seq))
    .limit(q.limit);
  return rows.map(({ entry, slug }) => toLedgerEntry(entry, slug));
}

export function toLedgerEntry(e: LedgerRow, slug: string | null): LedgerEntry {
  return {
    seq: e.seq,
    kind: e.kind,
    amount: e.amount,
    at: e.at.toISOString(),
    box: slug,
    periodStart: e.periodStart?.toISOString() ?? null,
    periodEnd: e.periodEnd?.toISOString() ?? null,
    expiresAt: e.expiresAt?.toISOString() ?? null,
    memo: e.memo,
  };
}
