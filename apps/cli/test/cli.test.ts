import { readFile, stat } from "node:fs/promises";
import { createServer } from "node:net";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PASSWORD, TestClient, uniqueEmail } from "../../api/test/support/client.ts";
import { startControlPlane, type TestControlPlane } from "../../api/test/support/control-plane.ts";
import { startBufferingProxy } from "./support/buffering-proxy.ts";
import { buildCli, type CliHome, cliHome } from "./support/cli.ts";
import { startCuttableProxy } from "./support/cuttable-proxy.ts";
import { type ScriptedAgent, startScriptedAgent } from "./support/scripted-agent.ts";

/** A loopback port nothing listens on: bound, then released. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

describe("doppio CLI against a real control plane", () => {
  let cp: TestControlPlane;
  let agent: ScriptedAgent;
  let home: CliHome;
  const email = uniqueEmail("cli");

  beforeAll(async () => {
    const [started] = await Promise.all([
      startControlPlane({ config: { authRateLimitPerMinute: 1000 } }),
      buildCli(),
    ]);
    cp = started;
    // The configured admin registers the scripted agent's server.
    agent = await startScriptedAgent(await cp.admin(), "cli-host", {
      failWith: (job) =>
        String(job.payload.slug).startsWith("doomed")
          ? { code: "disk_failed", error: "disk full on the host" }
          : null,
    });
    expect(
      (await new TestClient(cp.url).post("/api/v1/auth/signup", { email, password: PASSWORD })).status,
    ).toBe(201);
    home = await cliHome();
  });

  afterAll(async () => {
    await agent?.stop();
    await cp?.close();
    await home?.cleanup();
  });

  const configFile = () => path.join(home.configDir, "config.json");

  it("refuses a wrong password with exit 1 and a clear message, storing nothing", async () => {
    const r = await home.run(["login", "--url", cp.url, "--email", email, "--password-stdin"], {
      input: "not the password\n",
    });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^doppio: wrong email or password\nhint: .+\n$/);
    await expect(stat(configFile())).rejects.toThrow();
  });

  it("logs in with a password, storing a token (not the password) in a 0600 file", async () => {
    const r = await home.run(["login", "--url", cp.url, "--email", email, "--password-stdin"], {
      input: `${PASSWORD}\n`,
    });
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`as ${email}`);
    const info = await stat(configFile());
    expect(info.mode & 0o777).toBe(0o600);
    const text = await readFile(configFile(), "utf8");
    expect(text).not.toContain(PASSWORD);
    const config = JSON.parse(text);
    const ctx = config.contexts[config.current];
    expect(ctx.token).toMatch(/^dpb_/);
    // The stored token works against the API on its own.
    const me = await new TestClient(cp.url, ctx.token).get("/api/v1/me");
    expect(me.body.email).toBe(email);

    const who = await home.run(["whoami", "--json"]);
    expect(who.code).toBe(0);
    expect(JSON.parse(who.stdout)).toMatchObject({ email, url: cp.url });
  });

  it("lists templates", async () => {
    const r = await home.run(["templates", "--json"]);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout).map((t: { name: string }) => t.name)).toContain("minimal");
  });

  it("creates a box and waits until the job is done, with timestamped progress off a TTY", async () => {
    const r = await home.run(["create", "cli-box", "--template", "minimal", "--env", "GREETING=hello=world"]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("Box cli-box is running.");
    expect(r.stdout).toContain("https://cli-box.site.cli-host.example.test");
    expect(r.stderr).toMatch(/^\[\d\d:\d\d:\d\d\] creating cli-box: Restoring from the golden snapshot$/m);
    expect(r.stderr).toMatch(/^\[\d\d:\d\d:\d\d\] creating cli-box: succeeded after \d+s$/m);
  });

  it("waits on the event stream alone when the fallback poll is far away", async () => {
    // The first poll runs at once and the next only after a minute: only the stream can finish this in time.
    const r = await home.run(["create", "sse-box", "--template", "minimal"], {
      env: { DOPPIO_POLL_MS: "60000" },
    });
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("Box sse-box is running.");
  });

  it("falls back to polling when a proxy holds the event stream back", async () => {
    const proxy = await startBufferingProxy(cp.url);
    try {
      const config = JSON.parse(await readFile(configFile(), "utf8"));
      const token = config.contexts[config.current].token as string;
      const r = await home.run(["create", "poll-box", "--template", "minimal"], {
        env: { DOPPIO_URL: proxy.url, DOPPIO_TOKEN: token, DOPPIO_POLL_MS: "300" },
      });
      expect(r.stderr).toContain("creating poll-box: succeeded");
      expect(r.code).toBe(0);
      expect(r.stdout).toContain("Box poll-box is running.");
    } finally {
      await proxy.close();
    }
  });

  it("lists boxes as a table and as JSON", async () => {
    const table = await home.run(["ls"]);
    expect(table.code).toBe(0);
    const [header, ...rows] = table.stdout.trimEnd().split("\n");
    expect(header).toMatch(/^NAME\s+STATUS\s+HIBERNATES\s+TEMPLATE\s+SIZE\s+CREATED\s+SITE$/);
    // A new account starts with the platform's idle timeout (30 minutes).
    expect(rows.find((l) => l.startsWith("cli-box "))).toMatch(
      /^cli-box\s+running\s+in (29|30)m\s+minimal\s+small\s/,
    );

    const json = await home.run(["ls", "--json"]);
    const box = JSON.parse(json.stdout).find((b: { slug: string }) => b.slug === "cli-box");
    expect(box).toMatchObject({ status: "running", env: { GREETING: "hello=world" } });
  });

  it("stops and starts a box", async () => {
    const stop = await home.run(["stop", "cli-box", "--json"]);
    expect(stop.code).toBe(0);
    expect(JSON.parse(stop.stdout)).toMatchObject({
      box: { status: "stopped" },
      job: { status: "succeeded" },
    });

    const start = await home.run(["start", "cli-box"]);
    expect(start.code).toBe(0);
    expect(start.stdout).toContain("Box cli-box is running.");
    const status = await home.run(["status", "cli-box", "--json"]);
    expect(JSON.parse(status.stdout).status).toBe("running");
  });

  it("hibernates a box and resumes it; ls and status show when an idle box hibernates", async () => {
    const hib = await home.run(["hibernate", "cli-box"]);
    expect(hib.code).toBe(0);
    expect(hib.stdout).toContain("Box cli-box is hibernated.");
    const status = await home.run(["status", "cli-box"]);
    expect(status.stdout).toMatch(/status:\s+hibernated/);
    expect(status.stdout).toMatch(/saved memory:\s+48 MiB/);
    expect((await home.run(["start", "cli-box"])).stdout).toContain("Box cli-box is running.");

    expect((await home.run(["idle", "cli-box", "soon"])).code).toBe(2);
    const idle = await home.run(["idle", "cli-box", "45"]);
    expect(idle.code).toBe(0);
    expect(idle.stdout).toContain("Box cli-box hibernates after 45 idle minutes.");
    const [header, ...rows] = (await home.run(["ls"])).stdout.trimEnd().split("\n");
    expect(header).toMatch(/^NAME\s+STATUS\s+HIBERNATES\s+/);
    expect(rows.find((l) => l.startsWith("cli-box "))).toMatch(/^cli-box\s+running\s+in 4[45]m\s+minimal/);
    const awake = await home.run(["keep-awake", "cli-box"]);
    expect(awake.stdout).toMatch(/^Box cli-box hibernates in 4[45]m unless it is used\.\n$/);
    expect((await home.run(["idle", "cli-box", "off"])).stdout).toContain("does not hibernate when idle");
    expect((await home.run(["idle", "cli-box", "default", "--public-wake", "maybe"])).code).toBe(2);
    const wake = await home.run(["idle", "cli-box", "default", "--public-wake", "on", "--json"]);
    expect(JSON.parse(wake.stdout)).toMatchObject({ publicWake: true, idleTimeoutCustom: false });
    // Back on the owner's default (the platform's 30 minutes), counted from the keep-awake.
    expect((await home.run(["ls"])).stdout).toMatch(/cli-box\s+running\s+in (29|30)m\s+minimal/);
  });

  it("shows the box's job steps and URLs", async () => {
    const steps = await home.run(["jobs", "cli-box", "--steps"]);
    expect(steps.code).toBe(0);
    expect(steps.stdout).toMatch(/== create job [0-9a-f]{8}/);
    expect(steps.stdout).toMatch(/✓ Publishing URLs/);
    const jobs = await home.run(["jobs", "cli-box", "--json"]);
    expect(JSON.parse(jobs.stdout).map((j: { action: string }) => j.action)).toEqual([
      "start",
      "hibernate",
      "start",
      "stop",
      "create",
    ]);
    const open = await home.run(["open", "cli-box", "--port", "5173"]);
    expect(open.stdout).toBe("https://5173-cli-box.code.cli-host.example.test\n");
  });

  it("follows a box's jobs live with jobs -f until Ctrl-C", async () => {
    const follow = home.spawn(["jobs", "cli-box", "-f"]);
    try {
      await follow.waitForStdout((out) => out.includes("== start job"));
      const reset = await home.run(["reset", "cli-box", "--yes", "--no-wait"]);
      expect(reset.code).toBe(0);
      await follow.waitForStdout((out) =>
        /== reset job [0-9a-f]{8}[\s\S]*✓ Publishing URLs[\s\S]*\n {3}succeeded\n/.test(out),
      );
      follow.child.kill("SIGINT");
      expect(await follow.exited).toBe(130);
    } finally {
      follow.child.kill("SIGKILL");
    }
    // The reset ran to completion before the rm test below.
    expect(JSON.parse((await home.run(["status", "cli-box", "--json"])).stdout).status).toBe("running");
  });

  it("prints a box's log: plain off a terminal, NDJSON with --json, one source with --source", async () => {
    await agent.pushLogs("cli-box", [
      { source: "console", text: "Booting doppio guest" },
      { source: "bench", text: "\x1b[32mWatching for changes\x1b[0m \x1b]0;title\x07on :8000" },
      { source: "console", text: "login: ready" },
    ]);
    const plain = await home.run(["logs", "cli-box"]);
    expect(plain.stderr).toBe("");
    expect(plain.code).toBe(0);
    // Colours and other escapes are for terminals; a pipe gets the text alone.
    expect(plain.stdout).toBe(
      "[console] Booting doppio guest\n[bench] Watching for changes on :8000\n[console] login: ready\n",
    );

    const json = await home.run(["logs", "cli-box", "--json"]);
    expect(json.code).toBe(0);
    const lines = json.stdout
      .trimEnd()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(lines.map((l) => [l.source, l.text])).toEqual([
      ["console", "Booting doppio guest"],
      ["bench", "\x1b[32mWatching for changes\x1b[0m \x1b]0;title\x07on :8000"],
      ["console", "login: ready"],
    ]);
    expect(lines[0].seq).toBeLessThan(lines[2].seq);
    expect(Date.parse(lines[0].at)).not.toBeNaN();

    const bench = await home.run(["logs", "cli-box", "--source", "bench"]);
    expect(bench.stdout).toBe("[bench] Watching for changes on :8000\n");
    const last = await home.run(["logs", "cli-box", "-n", "1"]);
    expect(last.stdout).toBe("[console] login: ready\n");

    for (const args of [
      ["logs", "cli-box", "--tail", "lots"],
      ["logs", "cli-box", "-n", "5001"],
      ["logs", "cli-box", "--source", "Not A Source"],
    ]) {
      const r = await home.run(args);
      expect(r.code, args.join(" ")).toBe(2);
      expect(r.stderr, args.join(" ")).toMatch(/^doppio: .+\nhint: .+\n$/);
    }
  });

  it("follows the log with -f: backlog, then new lines, through a dropped connection", async () => {
    const proxy = await startCuttableProxy(cp.url);
    const config = JSON.parse(await readFile(configFile(), "utf8"));
    const token = config.contexts[config.current].token as string;
    const follow = home.spawn(["logs", "cli-box", "-f", "--source", "console"], {
      env: { DOPPIO_URL: proxy.url, DOPPIO_TOKEN: token },
    });
    try {
      await follow.waitForStdout((out) => out.includes("[console] login: ready\n"));
      await agent.pushLogs("cli-box", [
        { source: "bench", text: "filtered out" },
        { source: "console", text: "live line one" },
      ]);
      await follow.waitForStdout((out) => out.includes("[console] live line one\n"));

      proxy.cut();
      await agent.pushLogs("cli-box", [{ source: "console", text: "written while cut off" }]);
      await follow.waitForStdout((out) => out.includes("[console] written while cut off\n"));
      expect(follow.stderr()).toMatch(
        /^doppio: log stream lost \(.+\); reconnecting in [\d.]+s after line \d+$/m,
      );
      expect(follow.stderr()).toContain("doppio: reconnected to the log stream\n");
      // Each line once, in order, and nothing from the other source.
      expect(follow.stdout()).toBe(
        "[console] Booting doppio guest\n[console] login: ready\n[console] live line one\n[console] written while cut off\n",
      );

      follow.child.kill("SIGINT");
      expect(await follow.exited).toBe(130);
      expect(follow.stderr()).toContain("doppio: stopped following the log of cli-box\n");
    } finally {
      follow.child.kill("SIGKILL");
      await proxy.close();
    }
  });

  it("exits 1 for the log of an unknown box, with or without -f", async () => {
    for (const args of [
      ["logs", "no-such-box"],
      ["logs", "no-such-box", "-f"],
    ]) {
      const r = await home.run(args);
      expect(r.code, args.join(" ")).toBe(1);
      expect(r.stderr).toBe('doppio: box "no-such-box" not found\nhint: list your boxes with: doppio ls\n');
    }
  });

  it("refuses rm without --yes when not on a terminal, and deletes with --yes", async () => {
    const refused = await home.run(["rm", "cli-box"]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain("--yes");
    expect(JSON.parse((await home.run(["status", "cli-box", "--json"])).stdout).status).toBe("running");

    const rm = await home.run(["rm", "cli-box", "--yes"]);
    expect(rm.code).toBe(0);
    expect(rm.stdout).toContain("Box cli-box was deleted.");
    const ls = await home.run(["ls", "--json"]);
    expect(JSON.parse(ls.stdout).map((b: { slug: string }) => b.slug)).not.toContain("cli-box");
  });

  it("reports a failed job with exit 1 and the agent's reason", async () => {
    const r = await home.run(["create", "doomed-box", "--template", "minimal"]);
    expect(r.code).toBe(1);
    // The agent's error code reaches the user with its message.
    expect(r.stderr).toContain(
      "doppio: create of box doomed-box failed: disk full on the host [disk_failed]\nhint: ",
    );
    expect(r.stderr).not.toMatch(/\n\s+at /);
  });

  it("returns right away with --no-wait", async () => {
    const r = await home.run(["create", "--template", "minimal", "--no-wait", "--json"]);
    expect(r.code).toBe(0);
    const { box, job } = JSON.parse(r.stdout);
    expect(job.action).toBe("create");
    expect(box.slug).toMatch(/^[a-z]+-[a-z]+-[0-9a-f]{4}$/);
  });

  it("exits 1 for an unknown box, with one line and a hint", async () => {
    const r = await home.run(["status", "no-such-box"]);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe('doppio: box "no-such-box" not found\nhint: list your boxes with: doppio ls\n');
    const debug = await home.run(["status", "no-such-box", "--debug"]);
    expect(debug.code).toBe(1);
    expect(debug.stderr).toMatch(/^doppio: box "no-such-box" not found\n[\s\S]*\n\s+at /);
  });

  it("exits 2 for malformed --env and other usage errors, creating nothing", async () => {
    for (const args of [
      ["create", "bad-env", "--template", "minimal", "--env", "NOEQUALS"],
      ["create", "bad-env", "--template", "minimal", "--env", "1X=2"],
      ["create", "bad-env", "--template", "minimal", "--size", "huge"],
      ["create", "Bad_Name", "--template", "minimal"],
      ["ls", "--bogus"],
      ["frobnicate"],
    ]) {
      const r = await home.run(args);
      expect(r.code, args.join(" ")).toBe(2);
      expect(r.stderr, args.join(" ")).toMatch(/^doppio: .+\nhint: .+\n$/);
    }
    const ls = await home.run(["ls", "-q"]);
    expect(ls.stdout.split("\n")).not.toContain("bad-env");
  });

  it("exits 3 when the control plane cannot be reached (DOPPIO_URL/DOPPIO_TOKEN override the config)", async () => {
    const port = await closedPort();
    const r = await home.run(["ls"], {
      env: { DOPPIO_URL: `http://127.0.0.1:${port}`, DOPPIO_TOKEN: "dpb_unused" },
    });
    expect(r.code).toBe(3);
    expect(r.stderr).toMatch(
      /^doppio: cannot reach the control plane at http:\/\/127\.0\.0\.1:\d+.*\nhint: .+\n$/,
    );
  });

  it("manages contexts", async () => {
    expect((await home.run(["context", "add", "other", "--url", "http://127.0.0.1:9"])).code).toBe(0);
    const ls = await home.run(["context", "ls", "--json"]);
    const names = JSON.parse(ls.stdout).map((c: { name: string; current: boolean }) => [c.name, c.current]);
    expect(names).toContainEqual(["other", false]);
    expect(JSON.stringify(JSON.parse(ls.stdout))).not.toContain("dpb_");
    expect((await home.run(["context", "use", "nope"])).code).toBe(1);
    expect((await home.run(["context", "rm", "other"])).code).toBe(0);
    expect((await stat(configFile())).mode & 0o777).toBe(0o600);
  });

  it("signs in with an existing token, and runs from DOPPIO_URL/DOPPIO_TOKEN with no config at all", async () => {
    const session = new TestClient(cp.url);
    await session.post("/api/v1/auth/login", { email, password: PASSWORD });
    const { token } = (await session.post("/api/v1/tokens", { name: "ci" })).body as { token: string };

    const other = await cliHome();
    try {
      const login = await other.run(["login", "--url", cp.url, "--token", token]);
      expect(login.code).toBe(0);
      expect(JSON.parse((await other.run(["whoami", "--json"])).stdout).email).toBe(email);
    } finally {
      await other.cleanup();
    }

    const bare = await cliHome();
    try {
      const ls = await bare.run(["ls", "-q"], { env: { DOPPIO_URL: cp.url, DOPPIO_TOKEN: token } });
      expect(ls.code).toBe(0);
      expect(ls.stdout.split("\n")).toContain("sse-box");
      await expect(stat(path.join(bare.configDir, "config.json"))).rejects.toThrow();
    } finally {
      await bare.cleanup();
    }
  });

  it("logs out, revoking the token on the server", async () => {
    const config = JSON.parse(await readFile(configFile(), "utf8"));
    const token = config.contexts[config.current].token as string;
    const r = await home.run(["logout"]);
    expect(r.code).toBe(0);
    expect((await new TestClient(cp.url, token).get("/api/v1/me")).status).toBe(401);
    const after = await home.run(["ls"]);
    expect(after.code).toBe(1);
    expect(after.stderr).toContain("not signed in");
    expect(agent.errors).toEqual([]);
  });
});
