import { INVOICE_HTML_PATH, InvoiceParams, STRIPE_WEBHOOK_PATH } from "@doppio/contracts";
import type { FastifyPluginAsyncZod } from "fastify-type-provider-zod";
import { adjustWallet } from "../billing/adjust.ts";
import { getInvoice, invoiceHtml, invoiceOwnerEmail, listInvoices } from "../billing/invoices.ts";
import { listLedger } from "../billing/ledger.ts";
import { listPrices, setPrice } from "../billing/prices.ts";
import { createTopUp, handleStripeWebhook, listTopUps } from "../billing/stripe.ts";
import { walletView } from "../billing/wallet-view.ts";
import type { Ctx } from "../context.ts";
import { requireAdmin, requireUser } from "../http/auth.ts";
import { endpoint } from "./contract.ts";

export function billingRoutes(ctx: Ctx): FastifyPluginAsyncZod {
  const user = requireUser(ctx);
  const admin = requireAdmin(ctx);
  return async (app) => {
    app.route({
      ...endpoint("getWallet"),
      onRequest: user,
      handler: async (req) => walletView(ctx, req.principal!.userId),
    });
    app.route({
      ...endpoint("listLedger"),
      onRequest: user,
      handler: async (req) => ({ entries: await listLedger(ctx.db, req.principal!.userId, req.query) }),
    });
    app.route({
      ...endpoint("listPrices"),
      onRequest: user,
      handler: async () => listPrices(ctx),
    });
    app.route({
      ...endpoint("setPrice"),
      onRequest: admin,
      handler: async (req, reply) => reply.code(201).send(await setPrice(ctx, req.principal!, req.body)),
    });
    app.route({
      ...endpoint("createTopUp"),
      onRequest: user,
      handler: async (req, reply) =>
        reply.code(201).send(await createTopUp(ctx, req.principal!, req.body.amount)),
    });
    app.route({
      ...endpoint("listTopUps"),
      onRequest: user,
      handler: async (req) => ({ topUps: await listTopUps(ctx, req.principal!.userId) }),
    });
    app.route({
      ...endpoint("adjustWallet"),
      onRequest: admin,
      handler: async (req, reply) => reply.code(201).send(await adjustWallet(ctx, req.principal!, req.body)),
    });
    app.route({
      ...endpoint("listInvoices"),
      onRequest: user,
      handler: async (req) => ({ invoices: await listInvoices(ctx, req.principal!) }),
    });
    app.route({
      ...endpoint("getInvoice"),
      onRequest: user,
      handler: async (req) => getInvoice(ctx, req.principal!, req.params.id),
    });
    app.get(
      INVOICE_HTML_PATH,
      { onRequest: user, schema: { hide: true, params: InvoiceParams } },
      async (req, reply) => {
        const inv = await getInvoice(ctx, req.principal!, req.params.id);
        reply.header("content-type", "text/html; charset=utf-8");
        reply.header("content-security-policy", "default-src 'none'; style-src 'unsafe-inline'");
        return invoiceHtml(inv, await invoiceOwnerEmail(ctx, inv.id));
      },
    );
    await app.register(stripeWebhook(ctx));
  };
}

/** Stripe's webhook: its own plugin, so only here is the JSON body kept raw for the signature check. */
function stripeWebhook(ctx: Ctx): FastifyPluginAsyncZod {
  return async (app) => {
    app.addContentTypeParser("application/json", { parseAs: "buffer" }, (_req, body, done) =>
      done(null, body),
    );
    app.post(STRIPE_WEBHOOK_PATH, { schema: { hide: true } }, async (req) => {
      const signature = req.headers["stripe-signature"];
      const body = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
      return handleStripeWebhook(ctx, body, typeof signature === "string" ? signature : undefined);
    });
  };
}
