import {
  formatMoney,
  type Invoice,
  type LedgerKind,
  MS_PER_HOUR,
  MS_PER_STORAGE_MONTH,
} from "@doppio/contracts";
import { and, asc, desc, eq, gte, lt, ne, sql } from "drizzle-orm";
import { newId } from "../auth/secrets.ts";
import type { Ctx } from "../context.ts";
import { boxes, invoices, ledgerEntries, usageSettlements, users } from "../db/schema.ts";
import { notFound } from "../errors.ts";
import type { Principal } from "../services/users.ts";
import { nextMonthStart } from "./metering.ts";
import { usageByBox } from "./settle.ts";
import { monthStartOf } from "./wallet-view.ts";

type InvoiceRow = typeof invoices.$inferSelect;
type Line = InvoiceRow["lines"][number];

const CREDIT_LABEL: Record<LedgerKind, string> = {
  trial: "Trial credit",
  trial_expiry: "Unused trial credit expired",
  topup: "Card top-up",
  adjustment: "Adjustment",
  usage: "Usage",
  refund: "Card payment refunded",
  dispute: "Card payment disputed",
};

/**
 * Issues the invoice of every (user, month) that has ended and has ledger or usage rows but
 * no invoice yet. Run after settlement has passed the month's end (runBilling), so the month
 * is complete; the row is then never changed (a trigger refuses it).
 */
export async function issueInvoices(ctx: Ctx): Promise<number> {
  const before = monthStartOf(ctx.clock.now());
  const usageMonth = sql<string>`to_char(${usageSettlements.periodStart} AT TIME ZONE 'UTC', 'YYYY-MM')`;
  const ledgerMonth = sql<string>`to_char(${ledgerEntries.at} AT TIME ZONE 'UTC', 'YYYY-MM')`;
  const months = [
    ...(await ctx.db
      .selectDistinct({ userId: usageSettlements.userId, month: usageMonth })
      .from(usageSettlements)
      .where(lt(usageSettlements.periodStart, before))),
    ...(await ctx.db
      .selectDistinct({ userId: ledgerEntries.userId, month: ledgerMonth })
      .from(ledgerEntries)
      .where(and(ne(ledgerEntries.kind, "usage"), lt(ledgerEntries.at, before)))),
  ];
  const issuedAlready = new Set(
    (await ctx.db.select({ userId: invoices.userId, month: invoices.month }).from(invoices)).map(
      (i) => `${i.userId} ${i.month}`,
    ),
  );
  const due = new Map<string, { userId: string; month: string }>();
  for (const m of months) {
    const key = `${m.userId} ${m.month}`;
    if (!issuedAlready.has(key)) due.set(key, m);
  }
  let issued = 0;
  for (const { userId, month } of due.values()) {
    const [y, m] = month.split("-").map(Number);
    const start = new Date(Date.UTC(y!, m! - 1, 1));
    const end = nextMonthStart(start);
    const lines: Line[] = [];
    let usageTotal = 0;
    const usage = await usageByBox(ctx.db, userId, start, end);
    for (const u of usage) {
      const [box] = await ctx.db.select({ slug: boxes.slug }).from(boxes).where(eq(boxes.id, u.boxId));
      const slug = box?.slug ?? u.boxId;
      const compute = Number(u.compute);
      const storage = Number(u.storage);
      usageTotal += compute + storage;
      lines.push({
        box: slug,
        description: `${slug}: compute`,
        quantityMilli: Math.round((Number(u.computeMs) * 1000) / MS_PER_HOUR),
        unit: "hours",
        amount: compute,
      });
      lines.push({
        box: slug,
        description: `${slug}: storage`,
        quantityMilli: Math.round((Number(u.storageGbMs) * 1000) / MS_PER_STORAGE_MONTH),
        unit: "GB-months",
        amount: storage,
      });
    }
    const credits = await ctx.db
      .select()
      .from(ledgerEntries)
      .where(
        and(
          eq(ledgerEntries.userId, userId),
          ne(ledgerEntries.kind, "usage"),
          gte(ledgerEntries.at, start),
          lt(ledgerEntries.at, end),
        ),
      )
      .orderBy(asc(ledgerEntries.seq));
    let creditsTotal = 0;
    for (const c of credits) {
      creditsTotal += c.amount;
      lines.push({
        box: null,
        description: c.memo ? `${CREDIT_LABEL[c.kind]}: ${c.memo}` : CREDIT_LABEL[c.kind],
        quantityMilli: 1000,
        unit: "credit",
        amount: c.amount,
      });
    }
    const rows = await ctx.db
      .insert(invoices)
      .values({
        id: newId(),
        userId,
        month,
        currency: ctx.config.currency,
        usageTotal,
        creditsTotal,
        lines,
        issuedAt: ctx.clock.now(),
      })
      .onConflictDoNothing()
      .returning();
    issued += rows.length;
  }
  return issued;
}

const toInvoice = (r: InvoiceRow): Invoice => ({
  id: r.id,
  month: r.month,
  currency: r.currency,
  issuedAt: r.issuedAt.toISOString(),
  usageTotal: r.usageTotal,
  creditsTotal: r.creditsTotal,
  lines: r.lines,
});

export async function listInvoices(ctx: Ctx, p: Principal): Promise<Invoice[]> {
  const rows = await ctx.db
    .select()
    .from(invoices)
    .where(eq(invoices.userId, p.userId))
    .orderBy(desc(invoices.month));
  return rows.map(toInvoice);
}

/** The owner's invoice, or any for an administrator; another user's is "not found". */
export async function getInvoice(ctx: Ctx, p: Principal, id: string): Promise<Invoice> {
  const [row] = await ctx.db.select().from(invoices).where(eq(invoices.id, id));
  if (!row || (row.userId !== p.userId && p.role !== "admin")) throw notFound("invoice");
  return toInvoice(row);
}

export async function invoiceOwnerEmail(ctx: Ctx, id: string): Promise<string> {
  const [row] = await ctx.db
    .select({ email: users.email })
    .from(invoices)
    .innerJoin(users, eq(users.id, invoices.userId))
    .where(eq(invoices.id, id));
  return row?.email ?? "";
}

const esc = (s: string) =>
  s.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]!);

/** A printable page of the invoice (the browser's print dialog makes the PDF). */
export function invoiceHtml(inv: Invoice, owner: string): string {
  const qty = (l: Invoice["lines"][number]) =>
    l.unit === "credit" ? "" : `${(l.quantityMilli / 1000).toFixed(3)} ${l.unit}`;
  const rows = inv.lines
    .map(
      (l) =>
        `<tr><td>${esc(l.description)}</td><td>${esc(qty(l))}</td><td class="n">${esc(formatMoney(l.amount, inv.currency))}</td></tr>`,
    )
    .join("\n");
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Invoice ${esc(inv.month)}</title>
<style>body{font:14px system-ui,sans-serif;margin:2rem;max-width:50rem}table{width:100%;border-collapse:collapse}
td,th{border-bottom:1px solid #ddd;padding:.4rem;text-align:left}.n{text-align:right}</style></head>
<body><h1>doppiobox invoice ${esc(inv.month)}</h1>
<p>Invoice ${esc(inv.id)} for ${esc(owner)}, issued ${esc(inv.issuedAt)}</p>
<table><thead><tr><th>Item</th><th>Quantity</th><th class="n">Amount</th></tr></thead><tbody>
${rows}
</tbody></table>
<p><strong>Usage charged: ${esc(formatMoney(inv.usageTotal, inv.currency))}</strong><br>
Credits: ${esc(formatMoney(inv.creditsTotal, inv.currency))}</p>
</body></html>`;
}
