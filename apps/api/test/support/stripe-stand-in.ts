import { randomBytes } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import Stripe from "stripe";

/**
 * A local stand-in for the one Stripe API call the control plane makes,
 * `POST /v1/checkout/sessions`, reached through the real `stripe` library (its `host`,
 * `port` and `protocol` options). It checks what Stripe documents for a payment-mode session
 * with inline `price_data` (form encoding, bearer secret key, `mode`, `success_url`, each
 * line item's currency, integer `unit_amount`, product name) and answers with a Session
 * whose field names are checked at compile time against the library's types, which Stripe
 * generates from its published OpenAPI description.
 */
export interface StripeStandIn {
  host: string;
  port: number;
  /** Every session created, with the form fields it was created from. */
  sessions: Array<{ session: CheckoutSessionShape; form: URLSearchParams; auth: string | undefined }>;
  /** Webhook deliveries the checkout page made: the event and the endpoint's answer. */
  deliveries: Array<{ event: StripeEventShape; status: number }>;
  close(): Promise<void>;
}

/**
 * With this, the stand-in also plays Stripe's hosted checkout page: a session's `url` is a
 * page on the stand-in whose "Pay" button completes the session, delivers
 * `checkout.session.completed` to `webhookUrl` signed with `webhookSecret` exactly as Stripe
 * signs (the library's own signing helper), and sends the browser on to the `success_url`.
 */
export interface CheckoutPageOptions {
  webhookUrl: string;
  webhookSecret: string;
}

type CheckoutSessionShape = Pick<
  Stripe.Checkout.Session,
  | "id"
  | "object"
  | "amount_subtotal"
  | "amount_total"
  | "cancel_url"
  | "client_reference_id"
  | "created"
  | "currency"
  | "customer_email"
  | "expires_at"
  | "livemode"
  | "metadata"
  | "mode"
  | "payment_intent"
  | "payment_status"
  | "status"
  | "success_url"
  | "url"
>;

/** The documented event envelope (https://docs.stripe.com/api/events/object). */
type StripeEventShape = Pick<
  Stripe.Event,
  "id" | "object" | "api_version" | "created" | "livemode" | "pending_webhooks" | "request"
> & { type: string; data: { object: Record<string, unknown> } };

let eventSeq = 0;
export function stripeEvent(type: string, object: Record<string, unknown>, id?: string): StripeEventShape {
  return {
    id: id ?? `evt_test_${process.pid}_${Date.now()}_${eventSeq++}`,
    object: "event",
    api_version: "2026-10-28.endive",
    created: Math.floor(Date.now() / 1000),
    data: { object },
    livemode: false,
    pending_webhooks: 1,
    request: { id: null, idempotency_key: null },
    type,
  };
}

/** Only its webhook helpers are used: they sign exactly as Stripe does. */
const signer = new Stripe("sk_test_stand_in_signer");

/** POSTs `event` to a webhook endpoint with a `Stripe-Signature` header made by Stripe's library. */
export async function deliverSigned(url: string, secret: string, event: unknown): Promise<Response> {
  const payload = JSON.stringify(event);
  const header = signer.webhooks.generateTestHeaderString({ payload, secret });
  return fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json; charset=utf-8", "stripe-signature": header },
    body: payload,
  });
}

const escapeHtml = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

const readBody = (req: IncomingMessage) =>
  new Promise<string>((resolve, reject) => {
    let body = "";
    req.setEncoding("utf8");
    req.on("data", (c: string) => {
      body += c;
    });
    req.on("end", () => resolve(body));
    req.on("error", reject);
  });

function stripeError(param: string, message: string) {
  return { error: { type: "invalid_request_error", code: "parameter_missing", param, message } };
}

export async function startStripeStandIn(
  opts: { checkout?: CheckoutPageOptions } = {},
): Promise<StripeStandIn> {
  const sessions: StripeStandIn["sessions"] = [];
  const deliveries: StripeStandIn["deliveries"] = [];
  let base = "";
  const server: Server = createServer(async (req, res) => {
    const send = (status: number, body: unknown) => {
      res.writeHead(status, {
        "content-type": "application/json",
        "request-id": `req_${randomBytes(6).toString("hex")}`,
      });
      res.end(JSON.stringify(body));
    };
    const page = /^\/c\/pay\/(cs_test_[0-9a-f]+)$/.exec(req.url ?? "");
    if (page && opts.checkout) return checkoutPage(req, res, page[1]!, opts.checkout);
    const auth = req.headers.authorization;
    if (!auth?.startsWith("Bearer sk_"))
      return send(401, { error: { type: "invalid_request_error", message: "Invalid API Key provided" } });
    if (req.method !== "POST" || req.url !== "/v1/checkout/sessions") {
      return send(404, {
        error: {
          type: "invalid_request_error",
          message: `Unrecognized request URL (${req.method}: ${req.url})`,
        },
      });
    }
    if (!(req.headers["content-type"] ?? "").startsWith("application/x-www-form-urlencoded")) {
      return send(400, stripeError("", "form-encoded body expected"));
    }
    const form = new URLSearchParams(await readBody(req));
    for (const param of [
      "mode",
      "success_url",
      "line_items[0][quantity]",
      "line_items[0][price_data][currency]",
      "line_items[0][price_data][product_data][name]",
    ]) {
      if (!form.get(param)) return send(400, stripeError(param, `Missing required param: ${param}.`));
    }
    const unitAmount = form.get("line_items[0][price_data][unit_amount]") ?? "";
    if (!/^\d+$/.test(unitAmount))
      return send(400, stripeError("line_items[0][price_data][unit_amount]", "Invalid integer"));
    const quantity = Number(form.get("line_items[0][quantity]"));
    const mode = form.get("mode");
    if (mode !== "payment" && mode !== "setup" && mode !== "subscription")
      return send(400, stripeError("mode", "Invalid mode"));
    const id = `cs_test_${randomBytes(12).toString("hex")}`;
    const created = Math.floor(Date.now() / 1000);
    const metadata: Record<string, string> = {};
    for (const [k, v] of form) {
      const m = /^metadata\[(.+)\]$/.exec(k);
      if (m) metadata[m[1]!] = v;
    }
    const session: CheckoutSessionShape = {
      id,
      object: "checkout.session",
      amount_subtotal: Number(unitAmount) * quantity,
      amount_total: Number(unitAmount) * quantity,
      cancel_url: form.get("cancel_url"),
      client_reference_id: form.get("client_reference_id"),
      created,
      currency: form.get("line_items[0][price_data][currency]"),
      customer_email: form.get("customer_email"),
      expires_at: created + 24 * 3600,
      livemode: false,
      metadata,
      mode,
      payment_intent: null,
      payment_status: "unpaid",
      status: "open",
      success_url: form.get("success_url"),
      url: opts.checkout ? `${base}/c/pay/${id}` : `https://checkout.stripe.com/c/pay/${id}`,
    };
    sessions.push({ session, form, auth });
    send(200, session);
  });

  /** The hosted page: GET shows the amount and a Pay button; POST pays and delivers the webhook. */
  async function checkoutPage(
    req: IncomingMessage,
    res: ServerResponse,
    id: string,
    checkout: CheckoutPageOptions,
  ) {
    const made = sessions.find((s) => s.session.id === id);
    const html = (status: number, body: string) => {
      res.writeHead(status, { "content-type": "text/html; charset=utf-8" });
      res.end(`<!doctype html><html><head><title>Checkout</title></head><body>${body}</body></html>`);
    };
    if (!made) return html(404, "<h1>This checkout session does not exist</h1>");
    const { session } = made;
    const amount = `${((session.amount_total ?? 0) / 100).toFixed(2)} ${(session.currency ?? "").toUpperCase()}`;
    if (req.method === "GET") {
      return html(
        200,
        `<h1>Pay ${escapeHtml(amount)}</h1><p>${escapeHtml(session.customer_email ?? "")}</p>` +
          `<form method="post"><button type="submit">Pay</button></form>`,
      );
    }
    if (req.method !== "POST") return html(405, "<h1>Method not allowed</h1>");
    await readBody(req);
    if (session.status === "open") {
      session.status = "complete";
      session.payment_status = "paid";
      session.payment_intent = `pi_test_${randomBytes(8).toString("hex")}`;
    }
    const event = stripeEvent("checkout.session.completed", { ...session });
    const answer = await deliverSigned(checkout.webhookUrl, checkout.webhookSecret, event);
    deliveries.push({ event, status: answer.status });
    if (!answer.ok) return html(502, `<h1>The webhook endpoint answered ${answer.status}</h1>`);
    res.writeHead(303, { location: session.success_url ?? "/" });
    res.end();
  }

  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  base = `http://127.0.0.1:${port}`;
  return {
    host: "127.0.0.1",
    port,
    sessions,
    deliveries,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
