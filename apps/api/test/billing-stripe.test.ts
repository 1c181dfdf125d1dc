import { TopUp } from "@doppio/contracts";
import { eq } from "drizzle-orm";
import Stripe from "stripe";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FailedTopUp } from "../src/billing/funds.ts";
import { topUps } from "../src/db/schema.ts";
import { me, wallet } from "./support/billing.ts";
import { signedInClient, type TestClient } from "./support/client.ts";
import {
  DB_KINDS,
  dbUnavailable,
  startControlPlane,
  type TestControlPlane,
} from "./support/control-plane.ts";
import { SseReader } from "./support/sse.ts";
import { type StripeStandIn, startStripeStandIn, stripeEvent } from "./support/stripe-stand-in.ts";

const WEBHOOK_SECRET = "whsec_test_doppio_billing";
const WEBHOOK = "/api/v1/billing/stripe/webhook";
// Only its webhook helpers are used here: they sign exactly as Stripe does.
const stripe = new Stripe("sk_test_unused");

let seq = 0;
const evtId = () => `evt_test_${process.pid}_${seq++}`;

const completed = (
  session: { id: string; amount_total: number | null; client_reference_id: string | null },
  pi: string | null,
) => ({
  ...session,
  object: "checkout.session",
  currency: "eur",
  mode: "payment",
  payment_intent: pi,
  payment_status: "paid",
  status: "complete",
});

const charge = (pi: string, amount: number, amountRefunded: number, id = `ch_${pi}`) => ({
  id,
  object: "charge",
  amount,
  amount_refunded: amountRefunded,
  currency: "eur",
  paid: true,
  payment_intent: pi,
  refunded: amountRefunded === amount,
  status: "succeeded",
});

for (const kind of DB_KINDS) {
  const why = dbUnavailable(kind);
  if (why) console.warn(`SKIPPING stripe top-ups on ${kind}: ${why}`);
  describe.skipIf(why !== null)(`stripe top-ups [${kind}]`, () => {
    let standIn: StripeStandIn;
    let env: TestControlPlane;

    beforeAll(async () => {
      standIn = await startStripeStandIn();
      env = await startControlPlane({
        kind,
        config: {
          stripeSecretKey: "sk_test_doppio",
          stripeWebhookSecret: WEBHOOK_SECRET,
          stripeApi: { host: standIn.host, port: standIn.port, protocol: "http" },
        },
      });
    });
    afterAll(async () => {
      await env?.close();
      await standIn?.close();
    });

    const deliver = (payload: string, header?: string) =>
      fetch(new URL(WEBHOOK, env.url), {
        method: "POST",
        headers: {
          "content-type": "application/json; charset=utf-8",
          ...(header ? { "stripe-signature": header } : {}),
        },
        body: payload,
      });
    const signed = (body: unknown, opts: { secret?: string; timestamp?: number } = {}) => {
      const payload = JSON.stringify(body);
      const header = stripe.webhooks.generateTestHeaderString({
        payload,
        secret: opts.secret ?? WEBHOOK_SECRET,
        ...(opts.timestamp ? { timestamp: opts.timestamp } : {}),
      });
      return deliver(payload, header);
    };

    async function topUp(user: TestClient, amount: number) {
      const res = await user.post("/api/v1/billing/topups", { amount });
      expect(res.status).toBe(201);
      const made = standIn.sessions.find((s) => s.session.id === res.body.sessionId)!;
      expect(res.body.url).toBe(made.session.url);
      return made.session;
    }

    it("creates a Checkout Session through the Stripe library with the amount, currency and account", async () => {
      const user = await signedInClient(env.url, "checkout");
      const { id, email } = await me(user);
      expect((await wallet(user)).cardTopUps).toBe(true);
      const session = await topUp(user, 1500);
      const { form, auth } = standIn.sessions.at(-1)!;
      expect(auth).toBe("Bearer sk_test_doppio");
      expect(form.get("mode")).toBe("payment");
      expect(form.get("client_reference_id")).toBe(id);
      expect(form.get("customer_email")).toBe(email);
      expect(form.get("line_items[0][price_data][unit_amount]")).toBe("1500");
      expect(form.get("line_items[0][price_data][currency]")).toBe("eur");
      expect(session.payment_status).toBe("unpaid");
      // Creating a session credits nothing; too little or too much is refused before Stripe.
      expect((await wallet(user)).balance).toBe(2000);
      expect((await user.post("/api/v1/billing/topups", { amount: 10 })).status).toBe(400);
      expect((await user.post("/api/v1/billing/topups", { amount: 10_000_000 })).status).toBe(400);
    });

    it("credits only a verified checkout.session.completed, once, whatever the replays", async () => {
      const user = await signedInClient(env.url, "paid");
      const session = await topUp(user, 1000);
      const body = stripeEvent("checkout.session.completed", completed(session, "pi_paid_1"));

      const payload = JSON.stringify(body);
      expect((await deliver(payload)).status).toBe(400); // no signature
      const wrong = await signed(body, { secret: "whsec_not_ours" });
      expect(wrong.status).toBe(400);
      const expired = await signed(body, { timestamp: Math.floor(Date.now() / 1000) - 3600 });
      expect(expired.status).toBe(400);
      // A valid signature over another body: the amount was changed after signing.
      const header = stripe.webhooks.generateTestHeaderString({ payload, secret: WEBHOOK_SECRET });
      expect(
        (await deliver(payload.replace('"amount_total":1000', '"amount_total":99999'), header)).status,
      ).toBe(400);
      expect((await wallet(user)).balance).toBe(2000);

      expect((await signed(body)).status).toBe(200);
      expect((await wallet(user)).balance).toBe(3000);
      expect((await signed(body)).status).toBe(200); // the same event again
      expect((await signed({ ...body, id: evtId() })).status).toBe(200); // another event, same session
      expect((await wallet(user)).balance).toBe(3000);
      const topups = (await user.get("/api/v1/billing/ledger?kind=topup")).body.entries;
      expect(topups.map((e: { amount: number }) => e.amount)).toEqual([1000]);
    });

    it("ignores sessions it did not create, unpaid ones, and one claiming another account", async () => {
      const user = await signedInClient(env.url, "forger");
      const victim = await signedInClient(env.url, "victim");
      const { id: userId } = await me(user);
      const theirs = await topUp(victim, 2000);
      const unknown = { id: "cs_test_not_ours", amount_total: 50000, client_reference_id: userId };
      expect(
        (await signed(stripeEvent("checkout.session.completed", completed(unknown, "pi_x")))).status,
      ).toBe(200);
      // The victim's session re-pointed at the forger: not credited to anyone.
      const stolen = completed({ ...theirs, client_reference_id: userId }, "pi_y");
      expect((await signed(stripeEvent("checkout.session.completed", stolen))).status).toBe(200);
      const unpaid = { ...completed(theirs, "pi_z"), payment_status: "unpaid" };
      expect((await signed(stripeEvent("checkout.session.completed", unpaid))).status).toBe(200);
      expect((await wallet(user)).balance).toBe(2000);
      expect((await wallet(victim)).balance).toBe(2000);
    });

    it("debits back refunds (cumulative, out of order) and disputes; an event before its payment is retried", async () => {
      const user = await signedInClient(env.url, "refund");
      const session = await topUp(user, 3000);
      const pi = `pi_refund_${process.pid}_${kind}`;
      // A refund that arrives before its checkout completed: not known yet, Stripe retries.
      const early = stripeEvent("charge.refunded", charge(pi, 3000, 500));
      expect((await signed(early)).status).toBe(503);
      expect((await signed(stripeEvent("checkout.session.completed", completed(session, pi)))).status).toBe(
        200,
      );
      expect((await wallet(user)).balance).toBe(5000);
      expect((await signed(early)).status).toBe(200); // the retry
      expect((await wallet(user)).balance).toBe(4500);
      // A second partial refund (cumulative 1200), then the first one delivered again late.
      expect((await signed(stripeEvent("charge.refunded", charge(pi, 3000, 1200)))).status).toBe(200);
      expect((await signed(stripeEvent("charge.refunded", charge(pi, 3000, 500)))).status).toBe(200);
      expect((await wallet(user)).balance).toBe(3800);
      const dispute = {
        id: `dp_${pi}`,
        object: "dispute",
        amount: 1800,
        charge: `ch_${pi}`,
        currency: "eur",
        payment_intent: pi,
        reason: "fraudulent",
        status: "needs_response",
      };
      const disputed = stripeEvent("charge.dispute.created", dispute);
      expect((await signed(disputed)).status).toBe(200);
      expect((await signed(disputed)).status).toBe(200);
      expect((await wallet(user)).balance).toBe(2000);
      const kinds = (await user.get("/api/v1/billing/ledger")).body.entries.map(
        (e: { kind: string; amount: number }) => [e.kind, e.amount],
      );
      expect(kinds).toEqual([
        ["dispute", -1800],
        ["refund", -700],
        ["refund", -500],
        ["topup", 3000],
        ["trial", 2000],
      ]);
    });

    // A delayed payment method: Checkout completes with payment_status "unpaid", and the money
    // comes (or not) with checkout.session.async_payment_succeeded (or _failed), whose object is
    // the same Checkout Session, now "paid" (https://docs.stripe.com/checkout/fulfillment).
    const statusOf = async (sessionId: string) =>
      (await env.cp.ctx.db.select().from(topUps).where(eq(topUps.sessionId, sessionId)))[0]?.status;
    const pending = (session: Parameters<typeof completed>[0], pi: string) => ({
      ...completed(session, pi),
      payment_status: "unpaid",
    });

    it("credits a delayed payment when async_payment_succeeded comes, once, in any order", async () => {
      const user = await signedInClient(env.url, "delayed");
      const session = await topUp(user, 1200);
      const pi = `pi_delayed_${process.pid}_${kind}`;
      expect((await signed(stripeEvent("checkout.session.completed", pending(session, pi)))).status).toBe(
        200,
      );
      expect((await wallet(user)).balance).toBe(2000);
      expect(await statusOf(session.id)).toBe("processing");
      const succeeded = stripeEvent("checkout.session.async_payment_succeeded", completed(session, pi));
      expect((await signed(succeeded)).status).toBe(200);
      expect((await wallet(user)).balance).toBe(3200);
      expect(await statusOf(session.id)).toBe("paid");
      // A replay, and the same outcome as another event: credited once.
      expect((await signed(succeeded)).status).toBe(200);
      expect((await signed({ ...succeeded, id: evtId() })).status).toBe(200);
      expect((await signed(stripeEvent("checkout.session.completed", completed(session, pi)))).status).toBe(
        200,
      );
      expect((await wallet(user)).balance).toBe(3200);

      // Out of order: the success arrives before Checkout's completion (unpaid), which then
      // changes nothing; an unpaid "success" forged onto someone else's session credits nothing.
      const early = await topUp(user, 800);
      const pi2 = `${pi}_early`;
      expect(
        (await signed(stripeEvent("checkout.session.async_payment_succeeded", completed(early, pi2)))).status,
      ).toBe(200);
      expect((await signed(stripeEvent("checkout.session.completed", pending(early, pi2)))).status).toBe(200);
      expect(await statusOf(early.id)).toBe("paid");
      expect((await wallet(user)).balance).toBe(4000);
      const other = await signedInClient(env.url, "delayed-other");
      const theirs = await topUp(other, 900);
      const forged = { ...pending(theirs, "pi_forged"), client_reference_id: (await me(user)).id };
      expect((await signed(stripeEvent("checkout.session.async_payment_succeeded", forged))).status).toBe(
        200,
      );
      expect((await wallet(user)).balance).toBe(4000);
      expect((await wallet(other)).balance).toBe(2000);
      const topups = (await user.get("/api/v1/billing/ledger?kind=topup")).body.entries;
      expect(topups.map((e: { amount: number }) => e.amount)).toEqual([800, 1200]);
    });

    it("lists the owner's top-ups with their status and why a failed or expired one credited nothing, and streams each change to the owner", async () => {
      const user = await signedInClient(env.url, "listed");
      const other = await signedInClient(env.url, "listed-other");
      const abort = new AbortController();
      const stream = new SseReader(
        await user.open("/api/v1/events", { accept: "text/event-stream" }, abort.signal),
      );
      try {
        const paid = await topUp(user, 1000);
        const failing = await topUp(user, 1500);
        const leaving = await topUp(user, 2500);
        const pi = `pi_listed_${process.pid}_${kind}`;
        expect((await signed(stripeEvent("checkout.session.completed", completed(paid, pi)))).status).toBe(
          200,
        );
        expect((await signed(stripeEvent("charge.refunded", charge(pi, 1000, 1000)))).status).toBe(200);
        const pending = { ...completed(failing, `${pi}_f`), payment_status: "unpaid" };
        expect((await signed(stripeEvent("checkout.session.completed", pending))).status).toBe(200);
        expect((await signed(stripeEvent("checkout.session.async_payment_failed", pending))).status).toBe(
          200,
        );
        const expired = { ...completed(leaving, null), payment_status: "unpaid", status: "expired" };
        expect((await signed(stripeEvent("checkout.session.expired", expired))).status).toBe(200);
        // Expiry after payment is not a thing: a paid session stays paid.
        expect((await signed(stripeEvent("checkout.session.expired", completed(paid, pi)))).status).toBe(200);

        const list = await user.get("/api/v1/billing/topups");
        expect(list.status).toBe(200);
        const bySession = new Map(list.body.topUps.map((t: { sessionId: string }) => [t.sessionId, t]));
        expect(list.body.topUps.map((t: { sessionId: string }) => t.sessionId)).toEqual([
          leaving.id,
          failing.id,
          paid.id,
        ]);
        expect(bySession.get(paid.id)).toMatchObject({
          status: "refunded",
          refunded: 1000,
          failureReason: null,
        });
        expect(bySession.get(failing.id)).toMatchObject({
          status: "failed",
          amount: 1500,
          currency: "EUR",
          refunded: 0,
        });
        expect((bySession.get(failing.id) as { failureReason: string }).failureReason).toMatch(
          /payment failed after checkout.*nothing was credited/,
        );
        expect(bySession.get(leaving.id)).toMatchObject({ status: "expired" });
        expect((bySession.get(leaving.id) as { failureReason: string }).failureReason).toMatch(/expired/);
        // Nobody else sees them.
        expect((await other.get("/api/v1/billing/topups")).body.topUps).toEqual([]);

        const seen = (id: string, status: string) =>
          stream.waitFor(
            (f) =>
              f.event === "topup" &&
              (f.data as { sessionId: string }).sessionId === id &&
              (f.data as { status: string }).status === status,
          );
        await seen(paid.id, "paid");
        await seen(paid.id, "refunded");
        await seen(failing.id, "processing");
        const failedEvent = await seen(failing.id, "failed");
        expect(TopUp.parse(failedEvent).failureReason).toMatch(/payment failed/);
        await seen(leaving.id, "expired");
      } finally {
        abort.abort();
        await stream.close();
      }
    });

    it("credits nothing for async_payment_failed, records it, and tells the owner once", async () => {
      const told: Array<{ email: string } & FailedTopUp> = [];
      const notifier = env.cp.ctx.walletNotifier;
      env.cp.ctx.walletNotifier = {
        walletWarning: notifier.walletWarning,
        async topUpFailed(user, topUp) {
          told.push({ email: user.email, ...topUp });
        },
      };
      try {
        const user = await signedInClient(env.url, "bounced");
        const { email } = await me(user);
        const session = await topUp(user, 1500);
        const pi = `pi_failed_${process.pid}_${kind}`;
        expect((await signed(stripeEvent("checkout.session.completed", pending(session, pi)))).status).toBe(
          200,
        );
        const failed = stripeEvent("checkout.session.async_payment_failed", pending(session, pi));
        expect((await signed(failed)).status).toBe(200);
        expect((await signed(failed)).status).toBe(200);
        expect((await signed({ ...failed, id: evtId() })).status).toBe(200);
        expect((await wallet(user)).balance).toBe(2000);
        expect(await statusOf(session.id)).toBe("failed");
        expect(told).toEqual([{ email, sessionId: session.id, amount: 1500, currency: "EUR" }]);
        // Someone else's session named in a failure: not ours to record or announce.
        const other = await signedInClient(env.url, "bounced-other");
        const theirs = await topUp(other, 700);
        const forged = { ...pending(theirs, "pi_x2"), client_reference_id: (await me(user)).id };
        expect((await signed(stripeEvent("checkout.session.async_payment_failed", forged))).status).toBe(200);
        expect(await statusOf(theirs.id)).toBe("open");
        expect(told).toHaveLength(1);
      } finally {
        env.cp.ctx.walletNotifier = notifier;
      }
    });
  });
}
