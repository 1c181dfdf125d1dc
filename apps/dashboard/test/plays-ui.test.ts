import { execFileSync } from "node:child_process";
import { copyFileSync, mkdtempSync, symlinkSync, writeFileSync } from "node:fs";
import { mkdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { registerServer } from "../../api/test/support/client.ts";
import {
  ADMIN_EMAIL,
  ADMIN_PASSWORD,
  startControlPlane,
  type TestControlPlane,
} from "../../api/test/support/control-plane.ts";
import { freePort } from "../../api/test/support/ports.ts";
import { hasChromium, launchBrowser, type TestBrowser } from "./support/browser.ts";
import { buildDashboard } from "./support/build.ts";

/**
 * The server page's plays in Debian's Chromium, driven by real plays: a real control plane
 * runs the real ansible-playbook with the real ansible.cfg and JSON-lines callback, on
 * playbooks made for this test whose tasks all run on the controller (debug, pause, a
 * skipped one), so no host is needed and the timing is known: Prepare runs to its end,
 * Deploy agent waits until cancelled. (The real playbooks against a real host:
 * apps/agent/test/provision/control-plane-plays.ts.)
 */
const ROOT = path.resolve(import.meta.dirname, "../../..");
const SHOTS = path.join(ROOT, "test-artifacts/plays");
function hasAnsible(): boolean {
  try {
    execFileSync("sh", ["-c", "command -v ansible-playbook"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}
const missing = [
  !hasChromium && "/usr/bin/chromium (apt-get install chromium)",
  !hasAnsible() && "ansible-playbook (Debian package ansible; scripts/bootstrap.sh installs it)",
].filter(Boolean);
if (missing.length) console.warn(`SKIPPING the plays UI browser test: needs ${missing.join(" and ")}`);

const TASKS = `  tasks:
    - name: Say what runs
      ansible.builtin.debug:
        msg: "preparing the host for doppiobox"
    - name: Take a moment
      ansible.builtin.pause:
        seconds: 2
    - name: Change something
      ansible.builtin.debug:
        msg: "changed it"
      changed_when: true
    - name: Only on Firecracker hosts
      ansible.builtin.debug:
        msg: never
      when: false
`;
const WAIT = `    - name: Wait for the operator
      ansible.builtin.pause:
        seconds: 300
`;

function ansibleDir(): string {
  const real = path.join(ROOT, "provision/ansible");
  const dir = mkdtempSync(path.join(tmpdir(), "doppio-ansible-ui-"));
  copyFileSync(path.join(real, "ansible.cfg"), path.join(dir, "ansible.cfg"));
  symlinkSync(path.join(real, "callback_plugins"), path.join(dir, "callback_plugins"));
  const head = "- name: UI test\n  hosts: doppio_hosts\n  gather_facts: false\n";
  writeFileSync(path.join(dir, "playbook.yml"), head + TASKS);
  writeFileSync(path.join(dir, "deploy-agent.yml"), head + TASKS + WAIT);
  return dir;
}

/** Playbooks whose one task fails as a broken package mirror would: a failed Prepare. */
function failingAnsibleDir(): string {
  const real = path.join(ROOT, "provision/ansible");
  const dir = mkdtempSync(path.join(tmpdir(), "doppio-ansible-ui-fail-"));
  copyFileSync(path.join(real, "ansible.cfg"), path.join(dir, "ansible.cfg"));
  symlinkSync(path.join(real, "callback_plugins"), path.join(dir, "callback_plugins"));
  const play =
    "- name: UI test\n  hosts: doppio_hosts\n  gather_facts: false\n  tasks:\n    - name: Reach the package mirror\n      ansible.builtin.fail:\n        msg: the package mirror answered 503\n";
  for (const file of ["playbook.yml", "deploy-agent.yml"]) writeFileSync(path.join(dir, file), play);
  return dir;
}

describe.skipIf(missing.length > 0)("plays on the Servers page in a real browser", () => {
  let outDir: string;
  let playbooks: string;
  let cp: TestControlPlane;
  let browser: TestBrowser;

  beforeAll(async () => {
    outDir = await buildDashboard("doppio-dashboard-plays");
    playbooks = ansibleDir();
    cp = await startControlPlane({
      config: { dashboardDir: outDir, ansibleDir: playbooks, authRateLimitPerMinute: 1000 },
    });
    const admin = await cp.admin();
    await registerServer(admin, "ui-host", { status: "pending" });
    const ssh = await admin.post("/api/v1/servers/ui-host/ssh", {
      host: "127.0.0.1",
      port: await freePort(),
      user: "root",
    });
    expect(ssh.status, JSON.stringify(ssh.body)).toBe(200);
    await mkdir(SHOTS, { recursive: true });
    browser = await launchBrowser(cp.url);
  }, 180_000);

  afterAll(async () => {
    await browser?.close();
    await cp?.close();
    for (const dir of [outDir, playbooks]) if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("follows Prepare live to its end, then cancels a running Deploy agent from its Cancel button", async () => {
    const page = browser.page;
    await page.goto("/dashboard/login");
    await page.getByLabel("Email").fill(ADMIN_EMAIL);
    await page.getByLabel("Password").fill(ADMIN_PASSWORD);
    await page.getByRole("button", { name: "Log in" }).click();
    await page.getByRole("link", { name: "Servers" }).click();
    const plays = page.getByRole("region", { name: "Plays on ui-host" });
    await plays.waitFor();
    const progress = plays.locator("progress");
    const value = async () => Number(await progress.getAttribute("value"));
    const max = async () => Number(await progress.getAttribute("max"));

    // Prepare: the bar moves while the play runs (the page is never reloaded: the stream).
    await plays.getByRole("button", { name: "Prepare server" }).click();
    const play = plays.locator("div.play");
    await play.locator("[data-task-status=running]").first().waitFor();
    expect(await max()).toBe(4);
    await plays.getByRole("button", { name: "Cancel" }).waitFor();
    expect(await plays.getByRole("button", { name: "Prepare server" }).isDisabled()).toBe(true);
    const seen = new Set<number>([await value()]);
    while ((await play.getAttribute("data-status")) !== "success") {
      seen.add(await value());
      await page.waitForTimeout(100);
    }
    seen.add(await value());
    expect(
      [...seen].some((v) => v > 0 && v < 4),
      `progress seen: ${[...seen]}`,
    ).toBe(true);
    expect(await value()).toBe(4);
    expect(await progress.getAttribute("aria-label")).toBe("4 of 4 tasks done");
    await play.getByText("success").waitFor();
    // Counters as Ansible counts them (a changed result is also ok).
    expect(await play.locator("p.muted").first().textContent()).toBe(
      "4 / 4 tasks · ok 3 · changed 1 · failed 0 · skipped 1 · unreachable 0 · rescued 0 · ignored 0",
    );
    const rows = play.locator("ol.play-tasks > li");
    expect(await rows.evaluateAll((els) => els.map((e) => e.getAttribute("data-task-status")))).toEqual([
      "ok",
      "ok",
      "changed",
      "skipped",
    ]);
    // Each row: its status, its name and its time; the pause shows about its two seconds.
    const pause = rows.nth(1);
    expect(await pause.locator("summary").textContent()).toMatch(/^ok Take a moment [\d.]+\s?s$/);
    const secs = Number(/([\d.]+)\s?s$/.exec((await pause.locator("summary").textContent())!)![1]);
    expect(secs).toBeGreaterThanOrEqual(2);
    // Output is collapsed until the row is opened.
    const first = rows.nth(0);
    const output = first.locator("pre");
    expect(await first.locator("details").getAttribute("open")).toBeNull();
    expect(await output.isVisible()).toBe(false);
    await first.locator("summary").click();
    expect(await output.isVisible()).toBe(true);
    expect(await output.textContent()).toContain("preparing the host for doppiobox");
    expect(await plays.getByRole("button", { name: "Cancel" }).count()).toBe(0);
    await page.screenshot({ path: path.join(SHOTS, "01-prepare-done.png"), fullPage: true });

    // Deploy agent: it waits on its last task; the bar stops short, Cancel ends it.
    await plays.getByRole("button", { name: "Deploy agent" }).click();
    const waiting = play.locator("ol.play-tasks > li").nth(4);
    await waiting.and(page.locator("[data-task-status=running]")).waitFor({ timeout: 60_000 });
    expect(await play.getAttribute("data-status")).toBe("running");
    expect(await max()).toBe(5);
    expect(await value()).toBe(4);
    expect(await waiting.locator("summary").textContent()).toBe("running Wait for the operator");
    await page.screenshot({ path: path.join(SHOTS, "02-deploy-running.png"), fullPage: true });
    await plays.getByRole("button", { name: "Cancel" }).click();
    await page.locator("div.play[data-status=cancelled]").waitFor();
    await play.getByRole("alert").getByText("cancelled by an administrator").waitFor();
    expect(await waiting.getAttribute("data-task-status")).toBe("cancelled");
    expect(await plays.getByRole("button", { name: "Cancel" }).count()).toBe(0);
    expect(await plays.getByRole("button", { name: "Deploy agent" }).isEnabled()).toBe(true);
    // The earlier play is listed with its outcome.
    await plays.getByText("Earlier plays (1)").click();
    await plays.locator("details.play-history li").getByText("success").waitFor();
    await page.screenshot({ path: path.join(SHOTS, "03-deploy-cancelled.png"), fullPage: true });

    // What the page showed is what the API recorded.
    const admin = await cp.admin();
    const recorded = (await admin.get("/api/v1/servers/ui-host/plays")).body.plays;
    expect(recorded.map((p: { playbook: string; status: string }) => [p.playbook, p.status])).toEqual([
      ["deploy_agent", "cancelled"],
      ["prepare", "success"],
    ]);
    expect(browser.consoleErrors).toEqual([]);
  }, 180_000);

  it("shows a failed Prepare on the server card: the status error and the failing task's message", async () => {
    const failing = failingAnsibleDir();
    const other = await startControlPlane({
      config: { dashboardDir: outDir, ansibleDir: failing, authRateLimitPerMinute: 1000 },
    });
    let b: TestBrowser | undefined;
    try {
      const admin = await other.admin();
      await registerServer(admin, "ui-failing", { status: "pending" });
      await admin.post("/api/v1/servers/ui-failing/ssh", {
        host: "127.0.0.1",
        port: await freePort(),
        user: "root",
      });
      b = await launchBrowser(other.url);
      const page = b.page;
      await page.goto("/dashboard/login");
      await page.getByLabel("Email").fill(ADMIN_EMAIL);
      await page.getByLabel("Password").fill(ADMIN_PASSWORD);
      await page.getByRole("button", { name: "Log in" }).click();
      await page.getByRole("link", { name: "Servers" }).click();
      const card = page.locator('[data-server="ui-failing"]');
      const badge = card.locator(".card-head .badge");
      await badge.getByText("pending").waitFor();
      await card.getByRole("button", { name: "Prepare server" }).click();
      await card.locator("div.play[data-status=failure]").waitFor({ timeout: 60_000 });
      // The card follows the play's end without a reload: the status and why.
      const message = "Prepare server: Reach the package mirror: the package mirror answered 503";
      await badge.getByText("error", { exact: true }).waitFor();
      expect(await badge.getAttribute("class")).toContain("badge-error");
      await card.locator("p.error-text[role=alert]").getByText(message, { exact: true }).waitFor();
      await page.screenshot({ path: path.join(SHOTS, "04-prepare-failed.png"), fullPage: true });
      const server = (await admin.get("/api/v1/servers/ui-failing")).body;
      expect(server).toMatchObject({ status: "error", statusMessage: message });
      expect(b.consoleErrors).toEqual([]);
    } finally {
      await b?.close();
      await other.close();
      await rm(failing, { recursive: true, force: true });
    }
  }, 180_000);
});
