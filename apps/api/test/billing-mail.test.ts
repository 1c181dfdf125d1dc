import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { me, wallet } from "./support/billing.ts";
import { signedInClient } from "./support/client.ts";
import { startControlPlane, type TestControlPlane } from "./support/control-plane.ts";
import { type SmtpSink, startSmtpSink } from "./support/smtp-sink.ts";

/** Waits until the sink holds `n` messages (sending runs after the API has answered). */
async function mails(sink: SmtpSink, n: number) {
  for (let i = 0; i < 200 && sink.mail.length < n; i++) await new Promise((r) => setTimeout(r, 50));
  return sink.mail;
}

describe("wallet notices by email through a configured SMTP server", () => {
  let sink: SmtpSink;
  let env: TestControlPlane;

  beforeAll(async () => {
    sink = await startSmtpSink();
    env = await startControlPlane({
      config: {
        smtpUrl: sink.url,
        mailFrom: "doppiobox billing <billing@doppiobox.test>",
        // Verification links are mailed too (email-verification.test.ts); only wallet notices here.
        emailVerification: "off",
      },
    });
  });
  afterAll(async () => {
    await env?.close();
    await sink?.close();
  });

  it("mails the owner alone when the balance runs low and when it is empty; a dead mail server blocks nothing", async () => {
    const admin = await env.admin();
    const user = await signedInClient(env.url, "mailed");
    await signedInClient(env.url, "not-mailed");
    const { email } = await me(user);
    const balance = (await wallet(user)).balance;
    expect(
      (await admin.post("/api/v1/billing/adjustments", { email, amount: 150 - balance, memo: "low" })).status,
    ).toBe(201);
    const [low] = await mails(sink, 1);
    expect(low).toBeDefined();
    expect(low!.from).toBe("billing@doppiobox.test");
    expect(low!.to).toEqual([email]);
    expect(low!.headers.to).toBe(email);
    expect(low!.headers.subject).toBe("Your doppiobox balance is low");
    expect(low!.text).toContain("Your balance is low (1.50 EUR)");
    expect(low!.text).toContain(`${env.url}/dashboard/billing`);

    expect(
      (await admin.post("/api/v1/billing/adjustments", { email, amount: -150, memo: "empty" })).status,
    ).toBe(201);
    const [, empty] = await mails(sink, 2);
    expect(empty!.headers.subject).toBe("Your doppiobox wallet is empty");
    expect(empty!.text).toContain("Your wallet is empty (0.00 EUR)");
    // A failed delayed top-up (billing-stripe.test.ts drives it from the webhook) is mailed too.
    await env.cp.ctx.walletNotifier.topUpFailed(
      { id: (await me(user)).id, email },
      { sessionId: "cs_test_mail", amount: 2500, currency: "EUR" },
    );
    const [, , failed] = await mails(sink, 3);
    expect(failed!.headers.subject).toBe("Your doppiobox top-up failed");
    expect(failed!.text).toContain("Your payment of 25.00 EUR did not go through");
    expect(sink.mail).toHaveLength(3);

    // The mail server goes away: the wallet still moves, and the warning is still recorded.
    await sink.close();
    expect(
      (await admin.post("/api/v1/billing/adjustments", { email, amount: 1000, memo: "top" })).status,
    ).toBe(201);
    expect(
      (await admin.post("/api/v1/billing/adjustments", { email, amount: -900, memo: "low" })).status,
    ).toBe(201);
    expect((await wallet(user)).balance).toBe(100);
    expect((await wallet(user)).low).toBe(true);
  });
});
