import { randomBytes } from "node:crypto";
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type Stripe from "stripe";

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
  close(): Promise<void>;
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

export async function startStripeStandIn(): Promise<StripeStandIn> {
  const sessions: StripeStandIn["sessions"] = [];
  const server: Server = createServer(async (req, res) => {
    const send = (status: number, body: unknown) => {
      res.writeHead(status, {
        "content-type": "application/json",
        "request-id": `req_${randomBytes(6).toString("hex")}`,
      });
      res.end(JSON.stringify(body));
    };
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
      url: `https://checkout.stripe.com/c/pay/${id}`,
    };
    sessions.push({ session, form, auth });
    send(200, session);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    host: "127.0.0.1",
    port,
    sessions,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
