import { mkdir, rm } from "node:fs/promises";
import path from "node:path";
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startControlPlane, type TestControlPlane } from "../../api/test/support/control-plane.ts";
import { githubConfig } from "../../api/test/support/github.ts";
import { GitHubStandIn } from "../../api/test/support/github-standin.ts";
import { hasChromium, launchBrowser, type TestBrowser } from "./support/browser.ts";
import { buildDashboard } from "./support/build.ts";

const ROOT = path.resolve(import.meta.dirname, "../../..");
const SHOTS = path.join(ROOT, "test-artifacts/dashboard-github");

if (!hasChromium)
  console.warn("SKIPPING dashboard GitHub test: /usr/bin/chromium is missing (apt-get install chromium)");

/**
 * The GitHub pages in Chromium: "Sign in with GitHub" makes an account (the stand-in plays
 * github.com's authorize and install pages for its signed-in user), Settings connects an
 * installation, and the create page offers its repositories.
 */
describe.skipIf(!hasChromium)("dashboard: GitHub in a real browser", () => {
  const gh = new GitHubStandIn();
  let outDir: string;
  let cp: TestControlPlane;
  let browser: TestBrowser;
  let page: Page;
  let shot = 0;
  const screenshot = (name: string) =>
    page.screenshot({
      path: path.join(SHOTS, `${String(++shot).padStart(2, "0")}-${name}.png`),
      fullPage: true,
    });

  beforeAll(async () => {
    outDir = await buildDashboard("doppio-dashboard-gh");
    await gh.start();
    cp = await startControlPlane({ config: { ...githubConfig(gh), dashboardDir: outDir } });
    gh.setupUrl = `${cp.url}/api/v1/github/setup`;
    gh.browserUser = gh.addUser("octo", [{ email: "octo@example.com", primary: true, verified: true }]);
    await rm(SHOTS, { recursive: true, force: true });
    await mkdir(SHOTS, { recursive: true });
    browser = await launchBrowser(cp.url);
    page = browser.page;
  }, 180_000);

  afterAll(async () => {
    await browser?.close();
    await cp?.close();
    await gh.stop();
    if (outDir) await rm(outDir, { recursive: true, force: true });
  });

  it("signs up with GitHub, connects an installation in settings, and picks its repository on create", async () => {
    await page.goto("/dashboard/login");
    await page.getByRole("link", { name: "Sign in with GitHub" }).click();
    await page.waitForURL(`${cp.url}/dashboard/`);
    await expect.poll(() => page.locator(".who").getAttribute("title")).toBe("octo@example.com");

    await page.getByRole("link", { name: "Settings" }).click();
    await expect.poll(() => page.getByText("Linked as").textContent()).toContain("octo");
    await screenshot("settings-linked");
    await page.getByRole("button", { name: "Connect repositories" }).click();
    await page.waitForURL(`${cp.url}/dashboard/settings?github=connected`);
    await expect.poll(() => page.locator("li.mono").allTextContents()).toEqual(["octo/demo (private)"]);
    await screenshot("settings-connected");

    await page.getByRole("link", { name: "Boxes" }).click();
    await page.goto("/dashboard/new");
    const picker = page.getByLabel("GitHub repository (optional)");
    await expect.poll(() => picker.locator("option").allTextContents()).toEqual(["none", "octo/demo"]);
    await picker.selectOption("octo/demo");
    await screenshot("create-with-repo");

    // The first visit to /login (signed out) asked /me once and got 401.
    expect(browser.failedResponses.splice(0)).toEqual(["GET /api/v1/me 401"]);
    expect(browser.consoleErrors).toEqual([]);
  }, 120_000);
});
