import { mkdir, rm } from "node:fs/promises";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PASSWORD, uniqueEmail } from "../../api/test/support/client.ts";
import { startControlPlane, type TestControlPlane } from "../../api/test/support/control-plane.ts";
import { type SmtpSink, startSmtpSink } from "../../api/test/support/smtp-sink.ts";
import {
  deliverSigned,
  type StripeStandIn,
  startStripeStandIn,
  stripeEvent,
} from "../../api/test/support/stripe-stand-in.ts";
import { hasChromium, launchBrowser, type TestBrowser } from "./support/browser.ts";
import { buildDashboard } from "./support/build.ts";

const ROOT = path.resolve(import.meta.dirname, "../../..");
const SHOTS = path.join(ROOT, "test-artifacts/verify");
const WEBHOOK_SECRET = "whsec_test_doppio_dashboard";

if (!hasChromium)
  console.warn(
    "SKIPPING verification and top-ups browser test: /usr/bin/chromium is missing (apt-get install chromium)",
  );

describe.skipIf(!hasChromium)("Email verification and top-up statuses in a real browser", () => {
  let outDir: string;
  let cp: TestControlPlane;
  let browser: TestBrowser;
  let sink: SmtpSink;
  let standIn: StripeStandIn;
  const email = uniqueEmail("verify-page");

  beforeAll(async () => {
    outDir = await buildDashboard("doppio-dashboard-verify");
    sink = await startSmtpSink();
    standIn = await startStripeStandIn();
    cp = await startControlPlane({
      config: {
        dashboardDir: outDir,
        authRateLimitPerMinute: 1000,
        smtpUrl: sink.url,
        mailFrom: "doppiobox <accounts@doppiobox.test>",
        emailVerification: "required",
        stripeSecretKey: "sk_test_doppio",
        stripeWebhookSecret: WEBHOOK_SECRET,
        stripeApi: { host: standIn.host, port: standIn.port, protocol: "http" },
      },
    });
    await mkdir(SHOTS, { recursive: true });
    browser = await launchBrowser(cp.url);
  });

  afterAll(async () => {
    await browser?.close();
    await cp?.close();
    await standIn?.close();
    await sink?.close();
    if (outDir) await rm(outDir, { recursive: true, force: true });
  });

  /** The newest verification link mailed to `email`, once there are `n` of them. */
  async function link(n: number): Promise<string> {
    await expect
      .poll(() => sink.mail.filter((m) => m.to.includes(email)).length, { timeout: 20_000 })
      .toBe(n);
    const mail = sink.mail.filter((m) => m.to.includes(email)).at(-1)!;
    const url = new URL(/https?:\/\/\S+#token=\S+/.exec(mail.text)![0]);
    return `${url.pathname}${url.hash}`;
  }

  it("signs up unverified with a banner and no credit, resends, verifies from the link once, and shows the trial", async () => {
    const page = browser.page;
    await page.goto("/dashboard/signup");
    await page.getByLabel("Email").fill(email);
    await page.getByLabel("Password").fill(PASSWORD);
    await page.getByRole("button", { name: "Create account" }).click();
    const banner = page.locator("[data-verify-banner]");
    await banner.waitFor();
    expect(await banner.textContent()).toContain(`Verify your email address (${email})`);
    const first = await link(1);
    await banner.getByRole("button", { name: "Resend the link" }).click();
    await page.locator("[data-verify-resent]").waitFor();
    const second = await link(2);
    expect(second).not.toBe(first);
    await page.getByRole("link", { name: "Billing" }).click();
    await page.getByRole("heading", { name: "Billing" }).waitFor();
    expect(await page.locator("[data-balance]").textContent()).toBe("0.00 EUR");
    await page.screenshot({ path: path.join(SHOTS, "unverified.png"), fullPage: true });

    // The replaced link does not work; the newest does, once.
    await page.goto(`/dashboard${first.slice("/dashboard".length)}`);
    await page.getByRole("heading", { name: "This link did not work" }).waitFor();
    await page.goto(second);
    await page.getByRole("heading", { name: "Email address verified" }).waitFor();
    expect(await page.locator("[data-verified]").textContent()).toContain(
      "20.00 EUR of trial credit was added to your wallet",
    );
    expect(new URL(page.url()).hash).toBe(""); // the token left the address bar
    await page.screenshot({ path: path.join(SHOTS, "verified.png"), fullPage: true });
    expect(await page.locator("[data-verify-banner]").count()).toBe(0);
    await page.getByRole("link", { name: "Billing" }).click();
    await expect.poll(() => page.locator("[data-balance]").textContent()).toBe("20.00 EUR");

    await page.goto(second);
    await page.getByRole("heading", { name: "This link did not work" }).waitFor();
    expect(browser.consoleErrors).toEqual([]);
    // The signup page asks who is signed in (nobody yet), then the two refused links.
    expect(browser.failedResponses.sort()).toEqual([
      "GET /api/v1/me 401",
      "POST /api/v1/auth/verify-email 400",
      "POST /api/v1/auth/verify-email 400",
    ]);
  });

  it("lists top-ups on the Billing page and shows a failed and an expired one live, with the reason", async () => {
    const page = browser.page;
    const origin = new URL(cp.url).origin;
    const start = async (amount: number) => {
      const res = await page.request.post("/api/v1/billing/topups", {
        data: { amount },
        headers: { origin },
      });
      expect(res.status()).toBe(201);
      const { sessionId } = (await res.json()) as { sessionId: string };
      return standIn.sessions.find((s) => s.session.id === sessionId)!.session;
    };
    const deliver = async (type: string, object: Record<string, unknown>) => {
      const url = new URL("/api/v1/billing/stripe/webhook", cp.url).toString();
      const res = await deliverSigned(url, WEBHOOK_SECRET, stripeEvent(type, object));
      expect(res.status).toBe(200);
    };
    const failing = await start(1500);
    const leaving = await start(2500);
    await page.goto("/dashboard/billing");
    const row = (id: string) => page.locator(`[data-topup-row="${id}"]`);
    await row(failing.id).waitFor();
    expect(await row(failing.id).getAttribute("data-topup-status")).toBe("open");
    expect(await row(failing.id).textContent()).toContain("awaiting payment");

    // A bank debit: Checkout completes unpaid, then the payment fails. The page hears it.
    const pending = {
      ...failing,
      object: "checkout.session",
      currency: "eur",
      payment_intent: `pi_dash_${process.pid}`,
      payment_status: "unpaid",
      status: "complete",
    };
    await deliver("checkout.session.completed", pending);
    await deliver("checkout.session.async_payment_failed", pending);
    await expect.poll(() => row(failing.id).getAttribute("data-topup-status")).toBe("failed");
    expect(await row(failing.id).textContent()).toContain(
      "The payment failed after checkout (the bank declined or returned the debit); nothing was credited",
    );
    await deliver("checkout.session.expired", {
      ...leaving,
      object: "checkout.session",
      currency: "eur",
      payment_status: "unpaid",
      status: "expired",
    });
    await expect.poll(() => row(leaving.id).getAttribute("data-topup-status")).toBe("expired");
    expect(await row(leaving.id).textContent()).toContain(
      "The checkout page expired before a payment was made",
    );
    expect(await page.locator("[data-balance]").textContent()).toBe("20.00 EUR");
    await page.screenshot({ path: path.join(SHOTS, "top-ups.png"), fullPage: true });
    expect(browser.consoleErrors).toEqual([]);
  });
});
