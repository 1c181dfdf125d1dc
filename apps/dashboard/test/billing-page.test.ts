import { mkdir, rm } from "node:fs/promises";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PASSWORD, TestClient, uniqueEmail } from "../../api/test/support/client.ts";
import { startControlPlane, type TestControlPlane } from "../../api/test/support/control-plane.ts";
import { hasChromium, launchBrowser, type TestBrowser } from "./support/browser.ts";
import { buildDashboard } from "./support/build.ts";

const ROOT = path.resolve(import.meta.dirname, "../../..");
const SHOTS = path.join(ROOT, "test-artifacts/billing");

if (!hasChromium)
  console.warn("SKIPPING billing page browser test: /usr/bin/chromium is missing (apt-get install chromium)");

describe.skipIf(!hasChromium)("Billing page in a real browser", () => {
  let outDir: string;
  let cp: TestControlPlane;
  let browser: TestBrowser;
  const email = uniqueEmail("billing-page");

  beforeAll(async () => {
    outDir = await buildDashboard("doppio-dashboard-billing");
    cp = await startControlPlane({ config: { dashboardDir: outDir, authRateLimitPerMinute: 1000 } });
    expect(
      (await new TestClient(cp.url).post("/api/v1/auth/signup", { email, password: PASSWORD })).status,
    ).toBe(201);
    await mkdir(SHOTS, { recursive: true });
    browser = await launchBrowser(cp.url);
  });

  afterAll(async () => {
    await browser?.close();
    await cp?.close();
    if (outDir) await rm(outDir, { recursive: true, force: true });
  });

  it("shows the trial balance and ledger, explains missing card payments, and raises the low-balance banner live", async () => {
    const page = browser.page;
    await page.goto("/dashboard/login");
    await page.getByLabel("Email").fill(email);
    await page.getByLabel("Password").fill(PASSWORD);
    await page.getByRole("button", { name: "Log in" }).click();
    await page.getByRole("link", { name: "Billing" }).click();
    await page.getByRole("heading", { name: "Billing" }).waitFor();
    expect(await page.locator("[data-balance]").textContent()).toBe("20.00 EUR");
    await page.locator("[data-topup=not-configured]").waitFor();
    const ledger = page.getByRole("region", { name: "Ledger" });
    await ledger.getByText("trial credit").first().waitFor();
    expect(await page.locator("[data-wallet-banner]").count()).toBe(0);

    // An administrator takes the balance under the warning threshold: the page hears it live.
    const admin = await cp.admin();
    expect(
      (await admin.post("/api/v1/billing/adjustments", { email, amount: -1850, memo: "spent" })).status,
    ).toBe(201);
    await page.locator("[data-wallet-banner=low]").waitFor();
    expect(await page.locator("[data-balance]").textContent()).toBe("1.50 EUR");
    await page.screenshot({ path: path.join(SHOTS, "billing-page.png"), fullPage: true });

    // The ledger filter asks the API for one kind only.
    await ledger.getByRole("combobox").selectOption("adjustment");
    await ledger.getByText("spent").waitFor();
    expect(await ledger.getByText("trial credit").count()).toBe(0);
    expect(browser.consoleErrors).toEqual([]);
  });
});
