import type { BrowserContext, Page } from "playwright-core";
import { expect } from "vitest";

/**
 * A box's VS Code (code-server in the guest) in the browser, signed in through the control
 * plane's hand-off (/api/v1/access/open), as the dashboard's "Open VS Code" link does it.
 * A TCG guest serves code-server's bundle, its explorer and terminal slowly (minutes on a
 * loaded 2-core machine), hence the long waits.
 */
export async function openCodeServer(
  context: BrowserContext,
  apiUrl: string,
  codeHost: string,
): Promise<Page> {
  const code = await context.newPage();
  await code.goto(
    new URL(`/api/v1/access/open?host=${encodeURIComponent(codeHost)}&next=%2F`, apiUrl).toString(),
    { waitUntil: "commit", timeout: 120_000 },
  );
  await code.waitForSelector(".explorer-folders-view", { timeout: 180_000 });
  return code;
}

/** A file of the guest, read from inside the page (same origin as code-server, with its cookie). */
export function readGuestFile(code: Page, file: string): Promise<string> {
  return code.evaluate(async (f) => {
    const r = await fetch(`/vscode-remote-resource?path=${encodeURIComponent(f)}`);
    return r.ok ? r.text() : "";
  }, file);
}

/**
 * Types `command` into code-server's terminal as a user would, with its output and exit code
 * going to `out` (a guest file) as well, and returns that file once it has the `rc=` line. Ctrl+`
 * toggles the panel: it is pressed only while the panel is hidden (with the workbench
 * focused), and the command is typed again only if nothing was written.
 */
export async function runInTerminal(code: Page, command: string, out: string): Promise<string> {
  // The output shows in the terminal too (for the eye and the screenshots).
  const line = `{ ${command}; echo rc=$?; } 2>&1 | tee ${out}`;
  const terminal = code.locator(".terminal-wrapper .xterm").first();
  for (let i = 0; i < 3 && !(await readGuestFile(code, out)).includes("rc="); i++) {
    if (!(await terminal.isVisible())) {
      await code.locator(".explorer-folders-view").first().click();
      await code.keyboard.press("Control+Backquote");
    }
    await terminal.waitFor({ timeout: 180_000 });
    await terminal.click();
    await code.keyboard.type(`${line}\n`, { delay: 10 });
    await expect
      .poll(() => readGuestFile(code, out), { timeout: 60_000, interval: 1_000 })
      .toContain("rc=")
      .catch(() => undefined);
  }
  return readGuestFile(code, out);
}
