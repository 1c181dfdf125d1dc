import {
  AdjustmentRequest,
  Invoice,
  InvoiceList,
  InvoiceParams,
  LedgerEntry,
  LedgerPage,
  LedgerQuery,
  Price,
  PriceList,
  SetPriceRequest,
  TopUpList,
  TopUpRequest,
  TopUpSession,
  Wallet,
} from "./billing.ts";
import { route } from "./route.ts";

/** Stripe posts its events here (raw body, `Stripe-Signature`); not part of the JSON API. */
export const STRIPE_WEBHOOK_PATH = "/api/v1/billing/stripe/webhook";
/** A printable HTML rendering of an invoice (same access rule as `getInvoice`). */
export const INVOICE_HTML_PATH = "/api/v1/billing/invoices/:id/html";

/** The billing routes of the control plane (spread into `routes`, routes.ts). */
export const billingRoutes = {
  getWallet: route({
    method: "GET",
    path: "/api/v1/billing/wallet",
    summary: "Your balance, burn rate, time left and each box's cost this month",
    tag: "billing",
    auth: "user",
    responses: { 200: Wallet },
  }),
  listLedger: route({
    method: "GET",
    path: "/api/v1/billing/ledger",
    summary: "Your wallet's ledger, newest first (every credit and debit)",
    tag: "billing",
    auth: "user",
    query: LedgerQuery,
    responses: { 200: LedgerPage },
  }),
  listPrices: route({
    method: "GET",
    path: "/api/v1/billing/prices",
    summary: "Prices per box size: those in force and every version",
    tag: "billing",
    auth: "user",
    responses: { 200: PriceList },
  }),
  setPrice: route({
    method: "POST",
    path: "/api/v1/billing/prices",
    summary: "Add a price version for a size, effective now or later (administrators only)",
    tag: "billing",
    auth: "admin",
    errors: [409],
    body: SetPriceRequest,
    responses: { 201: Price },
  }),
  createTopUp: route({
    method: "POST",
    path: "/api/v1/billing/topups",
    summary: "Start a card top-up: a Stripe Checkout Session to send the browser to",
    tag: "billing",
    auth: "user",
    // 409: card payments are not configured here; 503: Stripe did not answer.
    errors: [409, 503],
    body: TopUpRequest,
    responses: { 201: TopUpSession },
  }),
  listTopUps: route({
    method: "GET",
    path: "/api/v1/billing/topups",
    summary: "Your recent card top-ups with their status (and why a failed one failed), newest first",
    tag: "billing",
    auth: "user",
    responses: { 200: TopUpList },
  }),
  adjustWallet: route({
    method: "POST",
    path: "/api/v1/billing/adjustments",
    summary: "Credit or debit a user's wallet by hand (administrators only)",
    tag: "billing",
    auth: "admin",
    errors: [404],
    body: AdjustmentRequest,
    responses: { 201: LedgerEntry },
  }),
  listInvoices: route({
    method: "GET",
    path: "/api/v1/billing/invoices",
    summary: "Your invoices, one per month that has ended, newest first",
    tag: "billing",
    auth: "user",
    responses: { 200: InvoiceList },
  }),
  getInvoice: route({
    method: "GET",
    path: "/api/v1/billing/invoices/:id",
    summary: "One invoice (yours; administrators see any)",
    tag: "billing",
    auth: "user",
    params: InvoiceParams,
    responses: { 200: Invoice },
  }),
} as const;
