import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { type BrowserContext, chromium, type Page } from "playwright-core";

const CHROMIUM = "/usr/bin/chromium";
export const hasChromium = existsSync(CHROMIUM);

const ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
  "--no-first-run",
  "--disable-quic",
];

export interface TestBrowser {
  context: BrowserContext;
  page: Page;
  /** Console errors and uncaught page errors of the app's own pages (its origin); a test expects none. */
  consoleErrors: string[];
  /**
   * The same from other origins: code-server's own pages, whose errors are its own (it
   * reaches for an extension gallery this sandbox cannot reach). Printed when the browser
   * closes, asserted by nobody.
   */
  foreignConsoleErrors: string[];
  /**
   * Answers of 400 and above ("METHOD /path STATUS") and requests that failed outright
   * ("METHOD /path failed"). Chromium logs each as a console error ("Failed to load
   * resource") even when the app handles it (401 from /me when signed out, 409 for a taken
   * email), so they are listed here instead and each test states exactly which it expects.
   */
  failedResponses: string[];
  close(): Promise<void>;
}

/** Debian's Chromium with a fresh, empty profile, removed on close. */
export async function launchBrowser(baseURL: string): Promise<TestBrowser> {
  const userDataDir = await mkdtemp(path.join(tmpdir(), "doppio-chromium-"));
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM,
    headless: true,
    args: ARGS,
    baseURL,
    viewport: { width: 1280, height: 860 },
    permissions: ["clipboard-read", "clipboard-write"],
  });
  const consoleErrors: string[] = [];
  const foreignConsoleErrors: string[] = [];
  const origin = new URL(baseURL).origin;
  const seen = (page: Page, text: string) => {
    const url = page.url();
    const own = url === "about:blank" || new URL(url).origin === origin;
    (own ? consoleErrors : foreignConsoleErrors).push(`${url}: ${text}`);
  };
  const failedResponses: string[] = [];
  const watch = (page: Page) => {
    page.on("console", (msg) => {
      if (msg.type() !== "error") return;
      const text = msg.text();
      if (text.startsWith("Failed to load resource:")) return;
      seen(page, text);
    });
    page.on("requestfailed", (req) => {
      // Requests cancelled by navigation, and event streams that were cut (the app reconnects
      // them), are not failures.
      const error = req.failure()?.errorText;
      if (error === "net::ERR_ABORTED" || error === "net::ERR_INCOMPLETE_CHUNKED_ENCODING") return;
      failedResponses.push(`${req.method()} ${new URL(req.url()).pathname} failed`);
    });
    page.on("response", (res) => {
      if (res.status() >= 400) {
        failedResponses.push(`${res.request().method()} ${new URL(res.url()).pathname} ${res.status()}`);
      }
    });
    page.on("pageerror", (err) => seen(page, `uncaught ${err.message}`));
  };
  context.on("page", watch);
  const page = context.pages()[0] ?? (await context.newPage());
  watch(page);
  return {
    context,
    page,
    consoleErrors,
    foreignConsoleErrors,
    failedResponses,
    async close() {
      if (foreignConsoleErrors.length > 0)
        console.warn(`console errors of other origins:\n${foreignConsoleErrors.join("\n")}`);
      await context.close();
      await rm(userDataDir, { recursive: true, force: true });
    },
  };
}
