import { mkdir, rm } from "node:fs/promises";
import path from "node:path";
import type { Page } from "playwright-core";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { TestClient } from "../../api/test/support/client.ts";
import {
  ADMIN_PASSWORD,
  startControlPlane,
  type TestControlPlane,
} from "../../api/test/support/control-plane.ts";
import { ManualAgent } from "./support/agent.ts";
import { hasChromium, launchBrowser, type TestBrowser } from "./support/browser.ts";
import { buildDashboard } from "./support/build.ts";

const ROOT = path.resolve(import.meta.dirname, "../../..");
const SHOTS = path.join(ROOT, "test-artifacts/dashboard");
/** The install's configured administrator, who drives most of this walk-through. */
const EMAIL = `owner-${process.pid}@example.com`;
const PASSWORD = ADMIN_PASSWORD;
/** Someone who signs up on their own. */
const VISITOR = `visitor-${process.pid}@example.com`;

if (!hasChromium)
  console.warn("SKIPPING dashboard browser tests: /usr/bin/chromium is missing (apt-get install chromium)");

describe.skipIf(!hasChromium)("dashboard in a real browser against the real control plane", () => {
  let outDir: string;
  let cp: TestControlPlane;
  let browser: TestBrowser;
  let page: Page;
  let agent: ManualAgent;
  let shot = 0;

  const screenshot = (name: string) =>
    page.screenshot({
      path: path.join(SHOTS, `${String(++shot).padStart(2, "0")}-${name}.png`),
      fullPage: true,
    });
  beforeAll(async () => {
    outDir = await buildDashboard("doppio-dashboard");
    cp = await startControlPlane({
      config: { dashboardDir: outDir, authRateLimitPerMinute: 1000, adminEmail: EMAIL },
    });
    await rm(SHOTS, { recursive: true, force: true });
    await mkdir(SHOTS, { recursive: true });
    browser = await launchBrowser(cp.url);
    page = browser.page;
  });

  /** Failed API answers the current test provokes on purpose; any other fails it. */
  let expectedFailures: string[] = [];
  afterEach(() => {
    const failed = browser.failedResponses.splice(0);
    const expected = expectedFailures;
    expectedFailures = [];
    expect(browser.consoleErrors).toEqual([]);
    expect(failed).toEqual(expected);
  });

  afterAll(async () => {
    await browser?.close();
    await cp?.close();
    if (outDir) await rm(outDir, { recursive: true, force: true });
  });

  it("sends a signed-out visitor to log in, and explains a weak password and a taken email", async () => {
    expectedFailures = ["GET /api/v1/me 401", "POST /api/v1/auth/signup 409"];
    await page.goto("/dashboard/");
    await page.waitForURL(/\/dashboard\/login\?next=/);
    await page.getByRole("link", { name: "Create an account" }).click();
    await page.getByLabel("Email").fill(VISITOR);
    await page.getByLabel("Password").fill("short");
    await page.getByRole("button", { name: "Create account" }).click();
    await expect.poll(() => page.getByRole("alert").textContent()).toContain("at least 10 characters");
    await screenshot("signup-weak-password");

    await page.getByLabel("Password").fill(PASSWORD);
    await page.getByRole("button", { name: "Create account" }).click();
    await page.getByRole("heading", { name: "No boxes yet" }).waitFor();
    await screenshot("boxes-empty");
    // Signing up never makes an administrator, even as the first account on the install.
    expect(await page.getByRole("link", { name: "Servers" }).count()).toBe(0);

    // The configured admin's own API session registers the test's agent.
    const admin = new TestClient(cp.url);
    expect((await admin.post("/api/v1/auth/login", { email: EMAIL, password: PASSWORD })).status).toBe(200);
    agent = await ManualAgent.register(admin, "fc-test");

    await page.getByRole("button", { name: "Log out" }).click();
    await page.waitForURL(/\/dashboard\/login/);
    await page.getByRole("link", { name: "Create an account" }).click();
    await page.getByLabel("Email").fill(EMAIL);
    await page.getByLabel("Password").fill(PASSWORD);
    await page.getByRole("button", { name: "Create account" }).click();
    await expect.poll(() => page.getByRole("alert").textContent()).toContain("already exists");
    await screenshot("signup-duplicate-email");

    await page.getByRole("link", { name: "Log in" }).click();
    await page.getByLabel("Email").fill(EMAIL);
    await page.getByLabel("Password").fill(PASSWORD);
    await page.getByRole("button", { name: "Log in" }).click();
    await page.getByRole("heading", { name: "No boxes yet" }).waitFor();
  });

  it("creates an API token, shows it once, and revokes it", async () => {
    await page.getByRole("link", { name: "API tokens" }).click();
    await page.getByText("No tokens yet.").waitFor();
    await page.getByLabel("Token name").fill("laptop CLI");
    await page.getByRole("button", { name: "Create token" }).click();
    const secret = await page.getByTestId("new-token").textContent();
    expect(secret?.length).toBeGreaterThan(20);
    await expect
      .poll(() => page.getByRole("status").filter({ hasText: "created" }).textContent())
      .toContain("you will not see it again");
    await page.getByRole("button", { name: "Copy token" }).click();
    expect(await page.evaluate(() => navigator.clipboard.readText())).toBe(secret);
    await screenshot("token-created");
    await page.getByRole("button", { name: "I have copied it" }).click();
    expect(await page.getByTestId("new-token").count()).toBe(0);
    // Tokens expire in 90 days unless the user picks otherwise.
    expect(await page.locator('[data-token="laptop CLI"]').textContent()).toContain("expires in 90 days");

    await page.getByRole("button", { name: "Revoke laptop CLI" }).click();
    const dialog = page.getByRole("dialog");
    await dialog.getByRole("button", { name: "Revoke token" }).click();
    await page.getByText("No tokens yet.").waitFor();
  });

  it("shows the server's warm pool and lets the admin set its size, which reaches the agent", async () => {
    await agent.heartbeat({
      pool: [{ template: "minimal", target: 2, ready: 1, filling: 1, diskGb: 10, memoryMb: 1024 }],
    });
    await page.getByRole("link", { name: "Servers" }).click();
    const row = page.locator('[data-server="fc-test"] .warm-pool [data-template="minimal"]');
    await row.waitFor();
    await expect.poll(async () => row.textContent()).toContain("minimal: 1 ready, 1 filling of 2");
    // What the two clones hold shows beside the boxes' use.
    const usage = page.locator('[data-server="fc-test"] .usages');
    await expect.poll(async () => usage.textContent()).toContain("Memory0 + 2 warm pool /");
    expect(await usage.textContent()).toContain("Disk0 + 20 warm pool /");
    const input = row.getByLabel("Warm pool size for minimal on fc-test");
    await input.fill("3");
    await row.getByRole("button", { name: "Set" }).click();
    // Saved: the agent's next heartbeat answer carries the size.
    await expect.poll(async () => agent.heartbeat()).toMatchObject({ warmPool: { minimal: 3 } });
  });

  it("shows the admin the server with its heartbeat, capacity and golden snapshots", async () => {
    await page.getByRole("link", { name: "Servers" }).click();
    const card = page.locator('[data-server="fc-test"]');
    await card.waitFor();
    const text = await card.textContent();
    expect(text).toContain("Heartbeat");
    expect(text).toContain("minimal: ready");
    expect(text).toContain("agent test");
    await screenshot("servers");

    // Building an image queues a build_image job for that server and template.
    await card.getByRole("button", { name: "Build the minimal image on fc-test" }).click();
    await card.getByRole("status").filter({ hasText: "Build queued" }).waitFor();
    const job = await agent.claim();
    expect(job).toMatchObject({ action: "build_image", payload: { template: "minimal" } });
    await agent.started(job);
    await agent.succeed(job);
  });

  it("creates a box and shows each step as the agent runs it, then running", async () => {
    await page.getByRole("link", { name: "Boxes" }).click();
    await page.getByRole("link", { name: "Create your first box" }).click();
    await page.getByRole("radio", { name: /Minimal/i }).waitFor();
    await page.getByLabel("Name (optional)").fill("Demo_Box");
    await expect.poll(() => page.locator("#box-name-help").textContent()).toContain("lowercase letters");
    expect(await page.getByLabel("Name (optional)").getAttribute("aria-invalid")).toBe("true");
    await page.getByLabel("Name (optional)").fill("demo-box");
    await page.getByRole("radio", { name: /Small/ }).check();
    await screenshot("create-form");
    await page.getByRole("button", { name: "Create box" }).click();
    await page.waitForURL(/\/dashboard\/boxes\/demo-box$/);
    await page.getByText("Queued. A server will pick this up shortly").waitFor();

    const job = await agent.claim();
    await agent.started(job);
    const steps = ["check_state", "allocate_ip", "prepare_disks", "setup_network", "restore_vm"] as const;
    for (const s of steps) {
      await agent.step(job, s, "running");
      await page.locator(`[data-step="${s}"][data-status="running"]`).waitFor();
      await agent.step(job, s, "succeeded");
      await page.locator(`[data-step="${s}"][data-status="succeeded"]`).waitFor();
    }
    await agent.send(job, { type: "log", line: "restored from golden minimal@1" });
    await agent.step(job, "wait_ready", "running");
    const running = page.locator('[data-step="wait_ready"][data-status="running"]');
    await running.waitFor();
    expect(await running.textContent()).toContain("Waiting for services");
    // The running step's counter moves on its own, with no event from the server.
    const before = await running.getByTestId("step-time").textContent();
    await expect
      .poll(() => running.getByTestId("step-time").textContent(), { timeout: 5000 })
      .not.toBe(before);
    // The box log is empty while it boots; the jobs' own lines are on the second tab.
    await page.getByTestId("log-empty").waitFor();
    await page.getByRole("tab", { name: "Jobs" }).click();
    await expect
      .poll(() => page.locator(".xterm-rows").textContent())
      .toContain("Restoring from the golden snapshot");
    await expect
      .poll(() => page.locator(".xterm-rows").textContent())
      .toContain("restored from golden minimal@1");
    await screenshot("box-creating");

    await agent.step(job, "wait_ready", "succeeded");
    await agent.step(job, "add_routes", "running");
    await agent.step(job, "add_routes", "succeeded");
    await agent.succeed(job);
    await page.locator('.page-head [data-status="running"]').waitFor();
    await page.locator('[data-job-status="succeeded"]').waitFor();
    expect(await page.locator(".steps li").count()).toBe(7);
    await expect.poll(() => page.locator(".xterm-rows").textContent()).toContain("finished");

    const site = page.getByRole("link", { name: "Open Site" });
    expect(await site.getAttribute("href")).toBe("https://demo-box.site.fc-test.example.test");
    const code = page.getByRole("link", { name: "Open VS Code" });
    const href = await code.getAttribute("href");
    expect(href).toBe("/api/v1/access/open?host=demo-box.code.fc-test.example.test&next=%2F");
    // Following it as this browser's session hands off to the box host with a token.
    const open = await page.request.get(href!, { maxRedirects: 0 });
    expect(open.status()).toBe(302);
    expect(open.headers().location).toMatch(/^https?:\/\/demo-box\.code\.fc-test\.example\.test/);
    await screenshot("box-running");
  });

  it("brings a signed-out visitor of Open VS Code back through login to the box host", async () => {
    const codeHost = "demo-box.code.fc-test.example.test";
    // The box host does not resolve here, so that last hop fails; the request itself is the proof.
    expectedFailures = ["GET /api/v1/me 401", "GET /__doppio/auth failed"];
    await page.getByRole("button", { name: "Log out" }).click();
    await page.waitForURL(/\/dashboard\/login/);
    await page.goto(`/api/v1/access/open?host=${codeHost}&next=%2F`);
    await page.waitForURL(/\/dashboard\/login\?next=%2Fapi%2Fv1%2Faccess%2Fopen/);
    await page.getByLabel("Email").fill(EMAIL);
    await page.getByLabel("Password").fill(PASSWORD);
    const handoff = page.waitForEvent("requestfailed", (r) => r.url().startsWith(`https://${codeHost}/`));
    await page.getByRole("button", { name: "Log in" }).click();
    const url = new URL((await handoff).url());
    expect(url.pathname).toBe("/__doppio/auth");
    expect(url.searchParams.get("token")).toBeTruthy();
    expect(url.searchParams.get("next")).toBe("/");
    // Chromium shows its error page for the failed hop; going on before it has would race it.
    await page.waitForURL((u) => u.protocol === "chrome-error:");
    await page.goto("/dashboard/boxes/demo-box");
    await page.locator('.page-head [data-status="running"]').waitFor();
  });

  it("edits environment variables with validated names", async () => {
    await page.getByRole("button", { name: "Add variable" }).click();
    await page.getByLabel("Name of variable 1").fill("1BAD");
    await page.getByText("Use letters, digits and _").waitFor();
    expect(await page.getByRole("button", { name: "Save variables" }).isDisabled()).toBe(true);
    await page.getByLabel("Name of variable 1").fill("FRAPPE_ENV");
    await page.getByLabel("Value of variable 1").fill("development");
    await page.getByRole("button", { name: "Save variables" }).click();
    await page.getByText("Saved. The box picks these up the next time it starts.").waitFor();
    const admin = new TestClient(cp.url);
    await admin.post("/api/v1/auth/login", { email: EMAIL, password: PASSWORD });
    expect((await admin.get("/api/v1/boxes/demo-box")).body.env).toEqual({ FRAPPE_ENV: "development" });
  });

  it("follows the box's log: backlog, live lines, a source filter and a pause when scrolled up", async () => {
    const rows = () => page.locator(".xterm-rows > div").allTextContents();
    const text = async () => (await rows()).map((r) => r.trimEnd()).filter(Boolean);
    await page.locator('[data-log-state="live"]').waitFor();
    expect(await page.getByTestId("log-empty").textContent()).toContain("No log lines yet");

    await agent.logs("demo-box", [
      { source: "console", text: "Booting doppio guest" },
      { source: "bench", text: "\x1b[32mbench serve\x1b[0m listening on :8000" },
    ]);
    // A fresh page gets them as the stream's backlog.
    await page.reload();
    await page.locator('[data-log-state="live"]').waitFor();
    await expect
      .poll(text)
      .toEqual(["console │ Booting doppio guest", "bench   │ bench serve listening on :8000"]);
    // Colours written by the service are kept.
    await page.locator(".xterm-rows span.xterm-fg-2", { hasText: "bench serve" }).waitFor();

    await agent.logs("demo-box", [{ source: "console", text: "login: ready" }]);
    await expect.poll(text).toContain("console │ login: ready");
    await screenshot("box-log");

    await page.getByLabel("Source").selectOption("bench");
    await expect.poll(text).toEqual(["bench │ bench serve listening on :8000"]);
    await agent.logs("demo-box", [
      { source: "console", text: "hidden by the filter" },
      { source: "bench", text: "GET / 200" },
    ]);
    await expect.poll(text).toEqual(["bench │ bench serve listening on :8000", "bench │ GET / 200"]);
    await page.getByLabel("Source").selectOption("");
    await expect.poll(text).toContain("console │ hidden by the filter");

    // The tabs switch with the arrow keys, one tab stop for both.
    await page.getByRole("tab", { name: "Box log" }).focus();
    await page.keyboard.press("ArrowRight");
    expect(await page.getByRole("tab", { name: "Jobs" }).getAttribute("aria-selected")).toBe("true");
    expect(await page.evaluate(() => document.activeElement?.textContent)).toBe("Jobs");
    await expect.poll(() => page.locator(".xterm-rows").textContent()).toContain("Publishing URLs");
    await page.keyboard.press("ArrowLeft");
    await expect.poll(text).toContain("console │ login: ready");

    // Scrolled up, new lines do not move the view; a button counts them and jumps back.
    await agent.logs(
      "demo-box",
      Array.from({ length: 40 }, (_, i) => ({ source: "console", text: `filler ${i}` })),
    );
    await expect.poll(text).toContain("console │ filler 39");
    await page.getByRole("log", { name: "Log of demo-box" }).hover();
    await page.mouse.wheel(0, -2000);
    const jump = page.getByRole("button", { name: /^Paused · jump to newest/ });
    await jump.waitFor();
    await agent.logs("demo-box", [{ source: "bench", text: "while you were reading" }]);
    await expect.poll(() => jump.textContent()).toBe("Paused · jump to newest (1 new)");
    expect(await text()).not.toContain("bench   │ while you were reading");
    await jump.click();
    await expect.poll(text).toContain("bench   │ while you were reading");
    expect(await jump.count()).toBe(0);
  });

  it("catches up after the live stream drops: a change made meanwhile shows on reconnect", async () => {
    await page.getByText("Live", { exact: true }).waitFor();
    // Refuse new stream connections, then cut the open one as a network blip would.
    await page.route("**/api/v1/events", (route) => route.abort());
    cp.cp.app.server.closeAllConnections();
    await page.getByText("Reconnecting…").waitFor();
    const api = new TestClient(cp.url);
    await api.post("/api/v1/auth/login", { email: EMAIL, password: PASSWORD });
    expect((await api.post("/api/v1/boxes/demo-box/stop")).status).toBe(202);
    await agent.runNext(["check_state", "remove_routes", "stop_vm", "teardown_network"]);
    expect(await page.locator('.page-head [data-status="running"]').count()).toBe(1);
    await page.unroute("**/api/v1/events");
    await page.getByText("Live", { exact: true }).waitFor({ timeout: 20_000 });
    await page.locator('.page-head [data-status="stopped"]').waitFor();
    await page.locator('[data-job-status="succeeded"] h2', { hasText: /^Stop/ }).waitFor();
    // Reconnects refused while the route was in place are the only failed requests allowed here.
    const refused = browser.failedResponses.filter((f) => f === "GET /api/v1/events failed");
    expect(refused).toEqual(browser.failedResponses);
    expectedFailures = refused;
  });

  it("starts and stops the box, with buttons following its allowed actions", async () => {
    expect(await page.getByRole("button", { name: "Stop", exact: true }).isDisabled()).toBe(true);
    await page.getByRole("button", { name: "Start", exact: true }).click();
    await page.locator('.page-head [data-status="starting"]').waitFor();
    expect(await page.getByRole("button", { name: "Start", exact: true }).isDisabled()).toBe(true);
    await agent.runNext(["check_state", "setup_network", "restore_vm", "wait_ready", "add_routes"]);
    await page.locator('.page-head [data-status="running"]').waitFor();
    expect(await page.getByRole("button", { name: "Start", exact: true }).isDisabled()).toBe(true);

    await page.getByRole("button", { name: "Stop", exact: true }).click();
    await page.locator('.page-head [data-status="stopping"]').waitFor();
    await agent.runNext(["check_state", "remove_routes", "stop_vm", "teardown_network"]);
    await page.locator('.page-head [data-status="stopped"]').waitFor();
    expect(await page.getByRole("button", { name: "Open Site" }).isDisabled()).toBe(true);
    await screenshot("box-stopped");

    await page.getByRole("button", { name: "Start", exact: true }).click();
    await agent.runNext(["check_state", "setup_network", "restore_vm", "wait_ready", "add_routes"]);
    await page.locator('.page-head [data-status="running"]').waitFor();
  });

  it("hibernates and resumes the box; shows when it hibernates when idle, and keeps it awake", async () => {
    await page.getByRole("button", { name: "Hibernate", exact: true }).click();
    await page.locator('.page-head [data-status="hibernating"]').waitFor();
    await agent.runNext(["check_state", "remove_routes", "hibernate_vm", "teardown_network"]);
    await page.locator('.page-head [data-status="hibernated"]').waitFor();
    expect(await page.getByTestId("idle-text").textContent()).toContain("48 MB of saved memory");
    expect(await page.getByRole("button", { name: "Hibernate", exact: true }).isDisabled()).toBe(true);
    await screenshot("box-hibernated");
    await page.getByRole("button", { name: "Resume", exact: true }).click();
    await agent.runNext(["check_state", "setup_network", "resume_vm", "wait_ready", "add_routes"]);
    await page.locator('.page-head [data-status="running"]').waitFor();
    // A new account starts with the platform's idle timeout (30 minutes), counted from the resume.
    expect(await page.getByTestId("idle-text").textContent()).toMatch(
      /^Hibernates in (29|30) min unless it is used\.$/,
    );

    // The owner changes their default (as the CLI would): the page follows the stream.
    const owner = new TestClient(cp.url);
    expect((await owner.post("/api/v1/auth/login", { email: EMAIL, password: PASSWORD })).status).toBe(200);
    expect((await owner.request("PATCH", "/api/v1/me/idle", { idleTimeoutMinutes: 10 })).status).toBe(200);
    await page.getByText(/Hibernates in (9|10) min unless it is used\./).waitFor();
    await page.getByRole("button", { name: "Keep awake", exact: true }).click();
    await page.getByText("Hibernates in 10 min unless it is used.").waitFor();
    await screenshot("box-idle");
    await owner.request("PATCH", "/api/v1/me/idle", { idleTimeoutMinutes: null });
    await page.getByText("Never hibernates when idle.").waitFor();
  });

  it("asks before a reset, and Escape cancels it", async () => {
    const reset = page.getByRole("button", { name: "Reset", exact: true });
    await reset.click();
    const dialog = page.getByRole("dialog", { name: "Reset demo-box?" });
    await dialog.waitFor();
    expect(await dialog.textContent()).toContain("name, URLs and environment variables stay the same");
    expect(await page.evaluate(() => document.activeElement?.textContent)).toBe("Cancel");
    await page.keyboard.press("Tab");
    expect(await page.evaluate(() => document.activeElement?.closest("dialog") !== null)).toBe(true);
    await screenshot("reset-dialog");
    await page.keyboard.press("Escape");
    await dialog.waitFor({ state: "hidden" });
    expect(await page.evaluate(() => document.activeElement?.textContent)).toBe("Reset");
  });

  it("has no horizontal scroll at 390 px", async () => {
    await page.setViewportSize({ width: 390, height: 844 });
    for (const route of ["/dashboard/boxes/demo-box", "/dashboard/", "/dashboard/new", "/dashboard/tokens"]) {
      await page.goto(route);
      await page.locator("main h1").first().waitFor();
      const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      expect(overflow, route).toBeLessThanOrEqual(0);
      if (route.includes("boxes/")) {
        await page.locator(".xterm-rows").waitFor();
        await screenshot("box-390px");
      }
    }
    await page.setViewportSize({ width: 1280, height: 860 });
  });

  it("deletes the box after a confirmation that says what is lost", async () => {
    await page.goto("/dashboard/boxes/demo-box");
    await page.getByRole("button", { name: "Delete", exact: true }).click();
    const dialog = page.getByRole("dialog", { name: "Delete demo-box?" });
    expect(await dialog.textContent()).toContain("removes everything");
    await dialog.getByRole("button", { name: "Delete box" }).click();
    await page.waitForURL(/\/dashboard\/$/);
    await page.locator('[data-slug="demo-box"] [data-status="deleting"]').waitFor();
    await screenshot("box-deleting");
    await agent.runNext([
      "check_state",
      "remove_routes",
      "stop_vm",
      "teardown_network",
      "remove_disks",
      "release_ip",
    ]);
    await page.getByRole("heading", { name: "No boxes yet" }).waitFor();
    await screenshot("boxes-after-delete");
  });

  it("creates from the keyboard alone, and shows a failed create's error in plain words", async () => {
    await page.getByRole("link", { name: "Create your first box" }).focus();
    await page.keyboard.press("Enter");
    await page.getByRole("radio", { name: /Minimal/i }).waitFor();
    // Tab order: template radios (one stop), size radios (one stop), then the name field.
    await page.getByRole("radio", { name: /Minimal/i }).focus();
    await page.keyboard.press("Tab");
    expect(await page.evaluate(() => (document.activeElement as HTMLInputElement).name)).toBe("size");
    await page.keyboard.press("ArrowRight");
    expect(await page.getByRole("radio", { name: /Medium/ }).isChecked()).toBe(true);
    await page.keyboard.press("Tab");
    await page.keyboard.type("broken-box");
    await page.keyboard.press("Enter");
    await page.waitForURL(/\/dashboard\/boxes\/broken-box$/);
    const job = await agent.claim();
    await agent.started(job);
    await agent.step(job, "check_state", "running");
    await agent.step(job, "check_state", "succeeded");
    await agent.step(job, "restore_vm", "running");
    await agent.step(job, "restore_vm", "failed", "the golden snapshot for minimal is missing on fc-test");
    await agent.send(job, {
      type: "result",
      ok: false,
      code: "golden_missing",
      error: "the golden snapshot for minimal is missing on fc-test",
    });
    await page.locator('[data-job-status="failed"]').waitFor();
    await page.locator('[data-step="restore_vm"][data-status="failed"]').waitFor();
    const alert = await page.locator(".job").getByRole("alert").textContent();
    expect(alert).toContain("the golden snapshot for minimal is missing on fc-test");
    // The agent's error code is shown with the message, on the job and on the box.
    expect(await page.locator(".job .error-code").textContent()).toBe("golden_missing");
    expect(await page.locator(".page-head + .notice-error .error-code").textContent()).toBe("golden_missing");
    await page.locator('.page-head [data-status="error"]').waitFor();
    expect(await page.getByRole("button", { name: "Start", exact: true }).isDisabled()).toBe(false);
    expect(await page.locator(".page-head").textContent()).toContain("medium");
    await screenshot("box-failed");
  });
});
