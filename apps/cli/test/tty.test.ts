import path from "node:path";
import { STEP_LABELS } from "@doppio/contracts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PASSWORD, TestClient, uniqueEmail } from "../../api/test/support/client.ts";
import { startControlPlane, type TestControlPlane } from "../../api/test/support/control-plane.ts";
import { BIN, buildCli, type CliHome, cliHome } from "./support/cli.ts";
import { type ScriptedAgent, startScriptedAgent } from "./support/scripted-agent.ts";
import { hasTmux, TmuxSession } from "./support/tmux.ts";

if (!hasTmux)
  console.warn("SKIPPING doppio CLI terminal tests: tmux is not installed (apt-get install tmux)");

const LABELS = Object.values(STEP_LABELS).map((l) => l.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
const PROGRESS_LINE = new RegExp(`^[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] creating tty-box · (${LABELS.join("|")}) · \\d+s$`, "m");

describe.skipIf(!hasTmux)("doppio CLI on a terminal (tmux)", () => {
  let cp: TestControlPlane;
  let agent: ScriptedAgent;
  let home: CliHome;
  let term: TmuxSession;
  const doppio = `${process.execPath} ${BIN}`;

  beforeAll(async () => {
    const [started] = await Promise.all([
      startControlPlane({ config: { authRateLimitPerMinute: 1000 } }),
      buildCli(),
    ]);
    cp = started;
    // Slow steps, so the terminal shows each one for a while.
    agent = await startScriptedAgent(await cp.admin(), "tty-host", { stepDelayMs: 400 });
    const email = uniqueEmail("tty");
    await new TestClient(cp.url).post("/api/v1/auth/signup", { email, password: PASSWORD });
    home = await cliHome();
    const login = await home.run(["login", "--url", cp.url, "--email", email, "--password-stdin"], {
      input: PASSWORD,
    });
    expect(login.code).toBe(0);
    term = new TmuxSession(path.join(home.dir, "tmux.sock"));
    await term.start({
      PATH: process.env.PATH ?? "/usr/bin:/bin",
      HOME: home.dir,
      XDG_CONFIG_HOME: home.env.XDG_CONFIG_HOME!,
      DOPPIO_POLL_MS: "500",
      LANG: "C.UTF-8",
      PS1: "$ ",
    });
  });

  afterAll(async () => {
    await term?.stop();
    await agent?.stop();
    await cp?.close();
    await home?.cleanup();
  });

  it("shows the current step and elapsed time on one updating line while waiting", async () => {
    await term.clear();
    await term.type(`${doppio} create tty-box --template minimal; echo "EXIT=$?"`);
    const screens = await term.waitFor((s) => /EXIT=\d+/.test(s));
    const final = screens.at(-1)!;
    expect(final).toContain("EXIT=0");
    // Some screen showed a step label with the spinner and elapsed seconds...
    expect(screens.some((s) => PROGRESS_LINE.test(s))).toBe(true);
    // ...and the progress never took more than one line: it was redrawn in place.
    for (const s of screens)
      expect(s.split("\n").filter((l) => l.includes("creating tty-box ·")).length).toBeLessThanOrEqual(1);
    expect(final).toMatch(/^✓ creating tty-box · Done · \d+s$/m);
    expect(final).toContain("Box tty-box is running.");
  });

  it("asks before deleting, and does nothing when the answer is no", async () => {
    await term.clear();
    await term.type(`${doppio} rm tty-box; echo "EXIT=$?"`);
    await term.waitFor((s) => s.includes("Delete box tty-box and its disk? This cannot be undone. [y/N]"));
    await term.type("n");
    const declined = (await term.waitFor((s) => /EXIT=\d+/.test(s))).at(-1)!;
    expect(declined).toContain("doppio: not confirmed; nothing was changed");
    expect(declined).toContain("EXIT=1");
    expect(JSON.parse((await home.run(["status", "tty-box", "--json"])).stdout).status).toBe("running");

    await term.clear();
    await term.type(`${doppio} rm tty-box; echo "EXIT=$?"`);
    await term.waitFor((s) => s.includes("[y/N]"));
    await term.type("y");
    const accepted = (await term.waitFor((s) => /EXIT=\d+/.test(s))).at(-1)!;
    expect(accepted).toContain("Box tty-box was deleted.");
    expect(accepted).toContain("EXIT=0");
  });

  it("stops waiting on Ctrl-C, says the job goes on, and exits 130", async () => {
    await term.clear();
    await term.type(`${doppio} create tty-box --template minimal; echo "EXIT=$?"`);
    await term.waitFor((s) => PROGRESS_LINE.test(s));
    await term.key("C-c");
    const final = (await term.waitFor((s) => /EXIT=\d+/.test(s))).at(-1)!;
    expect(final).toMatch(/doppio: stopped waiting; the create job [0-9a-f]{8} keeps running on the server/);
    expect(final).toContain("EXIT=130");
    // The job was not cancelled: the box still comes up.
    const deadline = Date.now() + 30_000;
    let status = "";
    while (status !== "running" && Date.now() < deadline) {
      status = JSON.parse((await home.run(["status", "tty-box", "--json"])).stdout).status;
      if (status !== "running") await new Promise((r) => setTimeout(r, 300));
    }
    expect(status).toBe("running");
    expect(agent.errors).toEqual([]);
  });
});
