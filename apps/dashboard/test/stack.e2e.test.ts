/**
 * Issue 7's end-to-end test: the real stack `make up` starts (control plane on PGlite,
 * Caddy, one agent with the QEMU backend building the minimal image and its golden
 * snapshot), driven in Debian's Chromium: sign up, create a box, watch it reach running,
 * open its site and VS Code URLs and see the box's own content, stop, start, delete; then
 * the admin builds the `code` template from the Servers page, and in a code box's VS Code
 * terminal git's credential helper reaches the host's metadata service. Issue 17's walk-through
 * runs on the same stack against the GitHub stand-in and its Git server: sign in with GitHub,
 * connect a repository, create a box from it, edit in VS Code, commit and push.
 */
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Host } from "../../../scripts/scale/host.ts";
import { runScaleTest } from "../../../scripts/scale/run.ts";
import { signedInClient, TestClient } from "../../api/test/support/client.ts";
import { GitHttpServer, hasGitHttpBackend } from "../../api/test/support/git-server.ts";
import { githubConfig } from "../../api/test/support/github.ts";
import { GitHubStandIn } from "../../api/test/support/github-standin.ts";
import { buildCli, cliHome } from "../../cli/test/support/cli.ts";
import { launchBrowser, type TestBrowser } from "./support/browser.ts";
import { openCodeServer, readGuestFile, runInTerminal } from "./support/code-server.ts";
import { startUpStack, type UpStack, upStackMissing, viaEdge } from "./support/up-stack.ts";

const EMAIL = `e2e-${process.pid}@example.com`;
const PASSWORD = "correct horse battery staple";
const ROOT = path.resolve(import.meta.dirname, "../../..");
const SHOTS = path.join(ROOT, "test-artifacts/e2e");
const README = "# demo\n\nA repository on the GitHub stand-in.\n";
const missing = [
  ...upStackMissing(),
  ...(hasGitHttpBackend ? [] : ["git-http-backend (apt-get install git)"]),
];
if (missing.length) console.warn(`SKIPPING the make-up end-to-end test: needs ${missing.join(" and ")}`);

describe.skipIf(missing.length > 0)("make up, end to end in a browser", () => {
  let up: UpStack;
  const gh = new GitHubStandIn();
  let git: GitHttpServer;
  let gitRoot: string | undefined;
  let data: string;
  let stack: UpStack["stack"];
  let settings: UpStack["settings"];
  let browser: TestBrowser;
  let page: Page;
  let adminPassword: string;
  let shot = 0;
  /**
   * The browser's own API requests with its session, as the dashboard sends them: JSON from the
   * dashboard's origin (Playwright's request API sends no Origin, which the CSRF check refuses).
   */
  const asDashboard = (data: Record<string, unknown> = {}) => ({
    data,
    headers: { origin: new URL(settings.API_URL).origin },
  });
  const screenshot = (name: string) =>
    page.screenshot({
      path: path.join(SHOTS, `${String(++shot).padStart(2, "0")}-${name}.png`),
      fullPage: true,
    });

  beforeAll(async () => {
    // GitHub for this stack: the stand-in (github.com's pages and REST API) with Git over
    // smart HTTP on its web origin; its signed-in browser user "octo" owns octo/demo.
    gitRoot = await mkdtemp(path.join(tmpdir(), "doppio-up-git-"));
    git = new GitHttpServer(gitRoot, (t, repo, write) => gh.gitAccess(t, repo, write));
    gh.git = (req, res) => git.handle(req, res);
    await gh.start();
    await git.createRepo("octo/demo", { "README.md": README });
    gh.browserUser = gh.addUser("octo", [{ email: "octo@example.com", primary: true, verified: true }]);
    // The boxes reach the stand-in's loopback port at their gateway (user-mode networking).
    up = await startUpStack({
      apiConfig: async () => githubConfig(gh),
      guestHostPorts: [Number(new URL(gh.webUrl).port)],
    });
    gh.setupUrl = `${up.settings.API_URL}/api/v1/github/setup`;
    ({ data, settings, stack, adminPassword } = up);
    await rm(SHOTS, { recursive: true, force: true });
    await mkdir(SHOTS, { recursive: true });
    browser = await launchBrowser(settings.API_URL);
    page = browser.page;
  }, 600_000);

  afterAll(async () => {
    await browser?.close();
    await up?.close();
    await gh.stop();
    if (gitRoot) await rm(gitRoot, { recursive: true, force: true });
  }, 120_000);

  it("signs up, creates a box, opens its site and VS Code, stops, starts and deletes it", async () => {
    await page.goto("/dashboard/");
    await page.getByRole("link", { name: "Create an account" }).click();
    await page.getByLabel("Email").fill(EMAIL);
    await page.getByLabel("Password").fill(PASSWORD);
    await page.getByRole("button", { name: "Create account" }).click();
    await page.getByRole("heading", { name: "No boxes yet" }).waitFor();

    await page.getByRole("link", { name: "Create your first box" }).click();
    await page.getByRole("radio", { name: /Minimal/i }).check();
    await page.getByLabel("Name (optional)").fill("e2e-box");
    await screenshot("create");
    await page.getByRole("button", { name: "Create box" }).click();
    await page.waitForURL(/\/dashboard\/boxes\/e2e-box$/);
    await page.locator('[data-step="restore_vm"]').waitFor({ timeout: 60_000 });
    await screenshot("creating");
    await page.locator('.page-head [data-status="running"]').waitFor({ timeout: 120_000 });
    await screenshot("running");
    // The box log shows the real guest's serial console as it came up.
    await expect
      .poll(() => page.locator(".xterm-rows").textContent(), { timeout: 30_000 })
      .toMatch(/DOPPIO-READY \d+/);
    await screenshot("box-log");

    // The site URL, through Caddy and the agent's edge, answers with the box's own slug.
    const siteHref = await page.getByRole("link", { name: "Open Site" }).getAttribute("href");
    expect(siteHref).toBe(`http://e2e-box.site.localhost:${process.env.DOPPIO_UP_EDGE_PORT}`);
    const site = await browser.context.newPage();
    await site.goto(siteHref!);
    expect((await site.textContent("body"))?.trim()).toBe("e2e-box");
    await site.screenshot({ path: path.join(SHOTS, `${String(++shot).padStart(2, "0")}-site.png`) });

    // VS Code is private: the link signs the owner in on the box host, then shows the box.
    const codeHref = await page.getByRole("link", { name: "Open VS Code" }).getAttribute("href");
    await site.goto(new URL(codeHref!, settings.API_URL).toString());
    expect(new URL(site.url()).host).toBe(`e2e-box.code.localhost:${process.env.DOPPIO_UP_EDGE_PORT}`);
    expect((await site.textContent("body"))?.trim()).toBe("e2e-box");
    await site.screenshot({ path: path.join(SHOTS, `${String(++shot).padStart(2, "0")}-code.png`) });
    // A browser without that sign-in gets no further than a sign-in redirect.
    const stranger = await viaEdge("e2e-box.code.localhost");
    expect(stranger.status).toBe(401);
    await site.close();

    await page.getByRole("button", { name: "Stop", exact: true }).click();
    await page.locator('.page-head [data-status="stopped"]').waitFor({ timeout: 60_000 });
    await screenshot("stopped");
    await page.getByRole("button", { name: "Start", exact: true }).click();
    await page.locator('.page-head [data-status="running"]').waitFor({ timeout: 120_000 });
    await screenshot("started");

    await page.getByRole("button", { name: "Delete", exact: true }).click();
    await page
      .getByRole("dialog", { name: "Delete e2e-box?" })
      .getByRole("button", { name: "Delete box" })
      .click();
    await page.getByRole("heading", { name: "No boxes yet" }).waitFor({ timeout: 60_000 });
    await screenshot("deleted");
    expect(browser.consoleErrors).toEqual([]);
  }, 420_000);

  it("creates three boxes at once, each answering its site and VS Code URLs through Caddy as itself", async () => {
    const slugs = ["trio-1", "trio-2", "trio-3"];
    const created = await Promise.all(
      slugs.map((name) =>
        page.request
          .post("/api/v1/boxes", asDashboard({ template: "minimal", name }))
          .then((r) => r.status()),
      ),
    );
    expect(created).toEqual([202, 202, 202]);
    for (const slug of slugs) {
      await expect
        .poll(async () => (await (await page.request.get(`/api/v1/boxes/${slug}`)).json()).status, {
          timeout: 180_000,
          interval: 500,
        })
        .toBe("running");
    }
    const macs = new Set<string>();
    for (const slug of slugs) {
      expect((await viaEdge(`${slug}.site.localhost`)).body.trim()).toBe(slug);
      const identity = (await viaEdge(`${slug}.site.localhost`, "/cgi-bin/identity")).body;
      expect(identity).toContain(`hostname=${slug}`);
      macs.add(/mac=(\S+)/.exec(identity)![1]!);
      const code = await browser.context.newPage();
      const href = `/api/v1/access/open?host=${slug}.code.localhost&next=%2F`;
      await code.goto(new URL(href, settings.API_URL).toString());
      expect((await code.textContent("body"))?.trim()).toBe(slug);
      await code.close();
    }
    expect(macs.size).toBe(3);
    for (const slug of slugs) {
      expect((await page.request.delete(`/api/v1/boxes/${slug}`, asDashboard())).status()).toBe(202);
    }
  }, 420_000);

  it("drives the same stack from the doppio CLI: login, create with wait, ls, stop, start, rm", async () => {
    await buildCli();
    const home = await cliHome();
    try {
      const login = await home.run(
        ["login", "--url", settings.API_URL, "--email", EMAIL, "--password-stdin"],
        { input: `${PASSWORD}\n` },
      );
      expect(login.code).toBe(0);
      const create = await home.run(["create", "cli-box", "--template", "minimal", "--env", "GREETING=hi"]);
      expect(create.code).toBe(0);
      // The live progress shows the steps the stream delivered (a fast restore may be done
      // before it is seen); the job's record has every one of them.
      const steps = await home.run(["jobs", "cli-box", "--steps"]);
      expect(steps.stdout).toMatch(/✓ Restoring from the golden snapshot/);
      expect((await viaEdge("cli-box.site.localhost", "/cgi-bin/identity")).body).toContain("greeting=hi");
      const ls = await home.run(["ls", "--json"]);
      expect(JSON.parse(ls.stdout).find((b: { slug: string }) => b.slug === "cli-box").status).toBe(
        "running",
      );
      expect((await home.run(["stop", "cli-box"])).code).toBe(0);
      expect(JSON.parse((await home.run(["status", "cli-box", "--json"])).stdout).status).toBe("stopped");
      expect((await home.run(["start", "cli-box"])).code).toBe(0);
      expect((await home.run(["rm", "cli-box", "--yes"])).code).toBe(0);
      expect((await home.run(["status", "cli-box"])).code).toBe(1);
    } finally {
      await home.cleanup();
    }
  }, 420_000);

  it("builds the code template from the Servers page; a code box's git asks the host's metadata service", async () => {
    // The admin builds the `code` image on server `local`: one job builds the image, then
    // its golden snapshot (the template had none), and the card follows the heartbeats.
    const admin = await launchBrowser(settings.API_URL);
    try {
      const p = admin.page;
      await p.goto("/dashboard/");
      await p.getByLabel("Email").fill(settings.ADMIN_EMAIL);
      await p.getByLabel("Password").fill(adminPassword);
      await p.getByRole("button", { name: "Log in" }).click();
      await p.getByRole("link", { name: "Servers" }).click();
      const card = p.locator('[data-server="local"]');
      await card.getByText("code: missing").waitFor();
      await card.getByRole("button", { name: "Build the code image on local" }).click();
      await card.getByRole("status").filter({ hasText: "Build queued" }).waitFor();
      await expect
        .poll(async () => (await (await p.request.get("/api/v1/servers/local")).json()).golden.code?.status, {
          timeout: 600_000,
          interval: 2_000,
        })
        .toBe("ready");
      await p.reload();
      await card.getByText("code: ready").waitFor();
      await p.screenshot({ path: path.join(SHOTS, `${String(++shot).padStart(2, "0")}-code-built.png`) });
    } finally {
      await admin.close();
    }

    // The user's code box: in its VS Code terminal, git asks git-credential-doppio, which asks
    // the agent's metadata service with the box's token, which asks the control plane. This
    // user has not linked GitHub, so the answer is its "not connected" message.
    expect(
      (await page.request.post("/api/v1/boxes", asDashboard({ template: "code", name: "git-box" }))).status(),
    ).toBe(202);
    await expect
      .poll(async () => (await (await page.request.get("/api/v1/boxes/git-box")).json()).status, {
        timeout: 180_000,
        interval: 1_000,
      })
      .toBe("running");
    const code = await openCodeServer(browser.context, settings.API_URL, "git-box.code.localhost");
    try {
      // The box's GitHub is the stand-in's, at the guest's gateway: the one origin
      // git-credential-doppio answers for.
      const text = await runInTerminal(
        code,
        `GIT_TERMINAL_PROMPT=0 git ls-remote "$(sed -n 's/^github=//p' /run/doppio/metadata)/octo/demo.git"`,
        "/workspace/git-credential.txt",
      );
      expect(text).toContain(
        "git-credential-doppio: GitHub is not connected for this box's owner; git will prompt",
      );
      expect(text).toContain("rc=128");
      await code.screenshot({ path: path.join(SHOTS, `${String(++shot).padStart(2, "0")}-code-git.png`) });
    } finally {
      await code.close();
    }
    expect((await page.request.delete("/api/v1/boxes/git-box", asDashboard())).status()).toBe(202);
  }, 900_000);

  it("signs in with GitHub, connects a repository, creates a box from it, edits in VS Code, commits and pushes", async () => {
    const octo = await launchBrowser(settings.API_URL);
    let failed: Page | undefined;
    try {
      const p = octo.page;
      await p.goto("/dashboard/login");
      await p.getByRole("link", { name: "Sign in with GitHub" }).click();
      await p.waitForURL(`${settings.API_URL}/dashboard/`);
      await p.getByRole("link", { name: "Settings" }).click();
      await p.getByRole("button", { name: "Connect repositories" }).click();
      await p.waitForURL(`${settings.API_URL}/dashboard/settings?github=connected`);
      await expect.poll(() => p.locator("li.mono").allTextContents()).toEqual(["octo/demo (private)"]);
      await p.screenshot({
        path: path.join(SHOTS, `${String(++shot).padStart(2, "0")}-github-connected.png`),
      });

      await p.getByRole("link", { name: "Boxes" }).click();
      await p.goto("/dashboard/new");
      await p.getByRole("radio", { name: /^VS Code/ }).check();
      await p.getByLabel("GitHub repository (optional)").selectOption("octo/demo");
      await p.getByLabel("Name (optional)").fill("demo-box");
      await p.getByRole("button", { name: "Create box" }).click();
      await p.waitForURL(/\/dashboard\/boxes\/demo-box$/);
      await p.locator('.page-head [data-status="running"]').waitFor({ timeout: 180_000 });

      // The guest clones the repository after it is ready, with an installation token.
      const code = await openCodeServer(octo.context, settings.API_URL, "demo-box.code.localhost");
      failed = code;
      const readme = "/workspace/demo/README.md";
      await expect
        .poll(() => readGuestFile(code, readme), { timeout: 120_000, interval: 2_000 })
        .toBe(README);
      // In the explorer (/workspace), as a user would: open the clone, then its README.
      const explorer = code.locator(".explorer-folders-view");
      await explorer.getByRole("treeitem", { name: "demo" }).click({ timeout: 300_000 });
      await explorer.getByRole("treeitem", { name: "README.md" }).click({ timeout: 120_000 });
      await code.locator(".monaco-editor .view-lines").first().click();
      await code.keyboard.press("Control+End");
      await code.keyboard.type("Edited in VS Code in a doppiobox.\n", { delay: 10 });
      await code.keyboard.press("Control+S");
      await expect
        .poll(() => readGuestFile(code, readme), { timeout: 30_000 })
        .toBe(`${README}Edited in VS Code in a doppiobox.\n`);

      const pushed = await runInTerminal(
        code,
        "cd demo && git commit -qam 'Edit the README in VS Code' && git push origin HEAD",
        "/workspace/push.log",
      );
      expect(pushed, pushed).toContain("rc=0");
      expect(await git.log("octo/demo")).toEqual(["Edit the README in VS Code", "seed"]);
      // Nobody configured git in the box: the author is octo's, from the box's metadata (off
      // github.com, with the account's own email).
      expect((await git.log("octo/demo", "%an <%ae>"))[0]).toBe("octo <octo@example.com>");
      await code.screenshot({
        path: path.join(SHOTS, `${String(++shot).padStart(2, "0")}-github-pushed.png`),
      });
      expect(octo.consoleErrors).toEqual([]);
      expect((await p.request.delete("/api/v1/boxes/demo-box", asDashboard())).status()).toBe(202);
    } catch (err) {
      await failed?.screenshot({ path: path.join(SHOTS, "github-walkthrough-failed.png") });
      throw err;
    } finally {
      await octo.close();
    }
  }, 1_200_000);

  it("npm run scale-test's checks pass on this stack (2 boxes): created at once, answering, stopped, started, deleted, nothing left", async () => {
    const lines: string[] = [];
    const result = await runScaleTest({
      apiUrl: settings.API_URL,
      server: settings.SERVER_NAME,
      boxes: 2,
      template: "minimal",
      admin: { email: settings.ADMIN_EMAIL, password: adminPassword },
      host: new Host({
        target: "local",
        agentDataDir: path.join(data, "agent"),
        caddyAdmin: settings.CADDY_ADMIN,
        node: { bin: process.execPath, cwd: path.join(ROOT, "apps/agent") },
      }),
      edge: `127.0.0.1:${settings.PORTS.edge}`,
      log: (l) => lines.push(l),
    });
    expect(
      result.checks.filter((c) => !c.ok),
      lines.join("\n"),
    ).toEqual([]);
    expect(result.checks.length).toBeGreaterThan(15);
    expect(result.memory).toHaveLength(2);
    expect(result.memory.every((m) => m.rssKb > 0 && m.pssKb > 0)).toBe(true);
  }, 900_000);

  it("after a database reset, make up registers server local again and says up only once it heartbeats", async () => {
    await stack.stopLocalStack();
    // The control plane's PGlite directory goes; the agent's images and golden snapshot stay.
    await rm(path.join(data, "api"), { recursive: true, force: true });
    await stack.startLocalStack();
    const admin = new TestClient(settings.API_URL);
    expect(
      (await admin.post("/api/v1/auth/login", { email: settings.ADMIN_EMAIL, password: adminPassword }))
        .status,
    ).toBe(200);
    const server = (await admin.get(`/api/v1/servers/${settings.SERVER_NAME}`)).body;
    expect(server.status).toBe("active");
    expect(server.lastHeartbeatAt).not.toBeNull();
    // As a new user would try it: before the fix this was 503 no_capacity, forever.
    const user = await signedInClient(settings.API_URL, "after-reset");
    const created = await user.post("/api/v1/boxes", { template: "minimal", name: "after-reset" });
    expect(created.status, JSON.stringify(created.body)).toBe(202);
  }, 600_000);
});
