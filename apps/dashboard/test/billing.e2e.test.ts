/**
 * Issue 18's walk-through on the real stack `make up` starts (control plane, Caddy, an agent
 * with the QEMU backend: support/up-stack.ts, the same fixture as stack.e2e.test.ts), in
 * Debian's Chromium: a new user signs up and gets the trial credit, creates a box, watches
 * its cost tick (the control plane settles every 2 s here), runs the wallet down to zero,
 * sees the box stopped through the ordinary stop job with its volume kept and the page saying
 * why, is refused a start with the 402 message, pays a top-up on the Stripe stand-in's
 * checkout page (which delivers `checkout.session.completed` signed by Stripe's own library
 * to the control plane's webhook), sees the credit, and starts the box, which serves its
 * data again.
 */
import { existsSync } from "node:fs";
import { mkdir, rm } from "node:fs/promises";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TestClient } from "../../api/test/support/client.ts";
import { type StripeStandIn, startStripeStandIn } from "../../api/test/support/stripe-stand-in.ts";
import { launchBrowser, type TestBrowser } from "./support/browser.ts";
import { startUpStack, type UpStack, upStackMissing, viaEdge } from "./support/up-stack.ts";

const EMAIL = `billing-e2e-${process.pid}@example.com`;
const PASSWORD = "correct horse battery staple";
const WEBHOOK_SECRET = "whsec_test_doppio_billing_e2e";
const ROOT = path.resolve(import.meta.dirname, "../../..");
const SHOTS = path.join(ROOT, "test-artifacts/billing-e2e");
const SLUG = "pay-box";
const MARKER = `kept-${process.pid}`;
const missing = upStackMissing();
if (missing.length) console.warn(`SKIPPING the billing walk-through: needs ${missing.join(" and ")}`);

describe.skipIf(missing.length > 0)("billing, end to end on the make-up stack in a browser", () => {
  let up: UpStack;
  let standIn: StripeStandIn;
  let browser: TestBrowser;
  let admin: TestClient;

  beforeAll(async () => {
    up = await startUpStack({
      apiConfig: async (settings) => {
        standIn = await startStripeStandIn({
          checkout: {
            webhookUrl: `${settings.API_URL}/api/v1/billing/stripe/webhook`,
            webhookSecret: WEBHOOK_SECRET,
          },
        });
        return {
          // Settle every 2 s so the cost moves while the test watches (the default is 2 min).
          settleIntervalMs: 2000,
          stripeSecretKey: "sk_test_doppio_e2e",
          stripeWebhookSecret: WEBHOOK_SECRET,
          stripeApi: { host: standIn.host, port: standIn.port, protocol: "http" },
        };
      },
    });
    admin = new TestClient(up.settings.API_URL);
    const login = await admin.post("/api/v1/auth/login", {
      email: up.settings.ADMIN_EMAIL,
      password: up.adminPassword,
    });
    expect(login.status).toBe(200);
    await rm(SHOTS, { recursive: true, force: true });
    await mkdir(SHOTS, { recursive: true });
    browser = await launchBrowser(up.settings.API_URL);
  }, 600_000);

  afterAll(async () => {
    await browser?.close();
    await up?.close();
    await standIn?.close();
  }, 120_000);

  it("trial credit, cost ticking, stopped at zero with its data kept, 402 on start, a Checkout top-up, started again", async () => {
    const page = browser.page;
    let shot = 0;
    const screenshot = (name: string) =>
      page.screenshot({
        path: path.join(SHOTS, `${String(++shot).padStart(2, "0")}-${name}.png`),
        fullPage: true,
      });
    const balance = async () => Number(await page.locator("[data-balance]").getAttribute("data-balance"));

    // A new user signs up and finds the trial credit on the Billing page.
    await page.goto("/dashboard/");
    await page.getByRole("link", { name: "Create an account" }).click();
    await page.getByLabel("Email").fill(EMAIL);
    await page.getByLabel("Password").fill(PASSWORD);
    await page.getByRole("button", { name: "Create account" }).click();
    await page.getByRole("heading", { name: "No boxes yet" }).waitFor();
    await page.getByRole("link", { name: "Billing" }).click();
    await page.getByRole("heading", { name: "Billing" }).waitFor();
    expect(await page.locator("[data-balance]").textContent()).toBe("20.00 EUR");
    await page.getByRole("region", { name: "Ledger" }).getByText("trial credit").first().waitFor();

    // An administrator makes compute dear (1 cent a second) so the walk-through takes seconds.
    for (const size of ["small", "medium", "large"]) {
      const price = await admin.post("/api/v1/billing/prices", {
        size,
        computePerHour: 3600,
        storagePerGbMonth: 10,
      });
      expect(price.status, JSON.stringify(price.body)).toBe(201);
    }

    await page.getByRole("link", { name: "Boxes" }).click();
    await page.getByRole("link", { name: "Create your first box" }).click();
    await page.getByRole("radio", { name: /Minimal/i }).check();
    await page.getByLabel("Name (optional)").fill(SLUG);
    await page.getByRole("button", { name: "Create box" }).click();
    await page.waitForURL(new RegExp(`/dashboard/boxes/${SLUG}$`));
    await page.locator('.page-head [data-status="running"]').waitFor({ timeout: 180_000 });
    // Something on its volume, to find again after the stop at zero.
    const stored = await viaEdge(`${SLUG}.site.localhost`, "/cgi-bin/data", { method: "POST", body: MARKER });
    expect(stored.status).toBe(200);
    expect((await viaEdge(`${SLUG}.site.localhost`, "/cgi-bin/data")).body.trim()).toBe(MARKER);

    // The box page shows its cost, and it moves while the box runs.
    const cost = page.locator(`[data-box-cost="${SLUG}"]`);
    await expect.poll(() => cost.textContent(), { timeout: 30_000 }).toContain("36.00 EUR/h now");
    const first = await cost.textContent();
    await expect.poll(() => cost.textContent(), { timeout: 60_000, interval: 1000 }).not.toBe(first);
    await screenshot("cost-ticking");

    // The administrator leaves 0.40 EUR: the low-balance banner comes live, then zero stops the box.
    const me = await page.request.get("/api/v1/billing/wallet");
    const left = (await me.json()).balance as number;
    const adjust = await admin.post("/api/v1/billing/adjustments", {
      email: EMAIL,
      amount: 40 - left,
      memo: "walk-through: nearly spent",
    });
    expect(adjust.status).toBe(201);
    await page.locator("[data-wallet-banner=low]").waitFor({ timeout: 30_000 });
    await page.locator("[data-wallet-banner=empty]").waitFor({ timeout: 120_000 });
    await page.locator('.page-head [data-status="stopped"]').waitFor({ timeout: 120_000 });
    const banner = page.locator("[data-wallet-banner=empty]");
    await expect.poll(() => banner.textContent(), { timeout: 30_000 }).toContain("Your wallet is empty");
    await expect.poll(() => banner.textContent(), { timeout: 30_000 }).toContain("running boxes are stopped");
    await screenshot("stopped-at-zero");

    // Stopped through the ordinary job path, not deleted: the stop job is in the box's record
    // and its disk is still on the host.
    const jobs = await (await page.request.get(`/api/v1/boxes/${SLUG}/jobs`)).json();
    expect(jobs.jobs.map((j: { action: string; status: string }) => `${j.action}:${j.status}`)).toContain(
      "stop:succeeded",
    );
    const boxDir = path.join(up.data, "agent/qemu/boxes", SLUG);
    expect(existsSync(path.join(boxDir, "overlay.qcow2"))).toBe(true);

    // Starting is refused with the 402 message, shown on the page.
    await page.getByRole("button", { name: "Start", exact: true }).click();
    const refusal = page.locator(".actions-wrap [role=alert]");
    // The API's message, as the page shows it (first letter capitalised).
    await expect
      .poll(() => refusal.textContent(), { timeout: 30_000 })
      .toMatch(/^Your wallet is empty \(balance -?\d+\.\d\d EUR\): top up to create or start boxes$/);
    expect(browser.failedResponses).toContain(`POST /api/v1/boxes/${SLUG}/start 402`);
    await screenshot("start-refused");

    // Top up by card: the banner's link, the Billing page, Stripe Checkout (the stand-in's page).
    await banner.getByRole("link", { name: "Top up" }).click();
    await page.getByRole("heading", { name: "Billing" }).waitFor();
    const before = await balance();
    expect(before).toBeLessThanOrEqual(0);
    await page.getByLabel("Top up (EUR)").fill("20");
    await page.getByRole("button", { name: "Pay by card" }).click();
    await page.waitForURL(/\/c\/pay\/cs_test_/);
    await page.getByRole("heading", { name: "Pay 20.00 EUR" }).waitFor();
    await page.getByRole("button", { name: "Pay" }).click();
    await page.waitForURL(/\/dashboard\/billing\?topup=done$/);
    expect(standIn.deliveries.map((d) => `${d.event.type} ${d.status}`)).toEqual([
      "checkout.session.completed 200",
    ]);
    // The credit is there: 20.00 EUR on top of what the wallet owed (storage still accrues).
    await expect.poll(balance, { timeout: 30_000 }).toBeGreaterThan(before + 1900);
    expect(await page.locator("[data-wallet-banner]").count()).toBe(0);
    await page
      .getByRole("region", { name: "Ledger" })
      .getByRole("cell", { name: /^topup · card top-up/ })
      .waitFor();
    // The top-up itself is listed, paid.
    await page.getByRole("region", { name: "Top-ups" }).locator('[data-topup-status="paid"]').waitFor();
    await screenshot("topped-up");

    // Start works again and the box serves what was on its volume before it was stopped.
    await page.getByRole("link", { name: SLUG }).first().click();
    await page.getByRole("button", { name: "Start", exact: true }).click();
    await page.locator('.page-head [data-status="running"]').waitFor({ timeout: 180_000 });
    expect((await viaEdge(`${SLUG}.site.localhost`)).body.trim()).toBe(SLUG);
    expect((await viaEdge(`${SLUG}.site.localhost`, "/cgi-bin/data")).body.trim()).toBe(MARKER);
    await screenshot("started-again");
    expect(browser.consoleErrors).toEqual([]);
  }, 900_000);
});
