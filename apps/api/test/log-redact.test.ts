import { Writable } from "node:stream";
import { LOG_REDACT, redactUrl } from "@doppio/contracts";
import { pino } from "pino";
import { describe, expect, it } from "vitest";
import { heartbeat, PASSWORD, registerServer, TestClient, uniqueEmail } from "./support/client.ts";
import { ADMIN_PASSWORD, startControlPlane } from "./support/control-plane.ts";
import { githubConfig, oauthFlow } from "./support/github.ts";
import { GitHubStandIn } from "./support/github-standin.ts";

/** Collects every log line written to it. */
function capture(): { stream: Writable; text: () => string } {
  const chunks: string[] = [];
  const stream = new Writable({
    write(chunk, _enc, done) {
      chunks.push(String(chunk));
      done();
    },
  });
  return { stream, text: () => chunks.join("") };
}

describe("log redaction", () => {
  it("keeps passwords, tokens, cookies and authorization headers out of the control plane's logs", async () => {
    const logs = capture();
    const cp = await startControlPlane({ config: { logLevel: "trace" }, logTo: logs.stream });
    const secrets: string[] = [PASSWORD, ADMIN_PASSWORD];
    try {
      const user = new TestClient(cp.url);
      await user.post("/api/v1/auth/signup", { email: uniqueEmail("log"), password: PASSWORD });
      secrets.push(user.sessionCookie!.split("=")[1]!);
      const token = (await user.post("/api/v1/tokens", { name: "t" })).body.token as string;
      secrets.push(token);
      await new TestClient(cp.url, token).get("/api/v1/me");
      const admin = await cp.admin();
      const agent = await registerServer(admin, "fc-log");
      await agent.post("/agent/v1/heartbeat", heartbeat());

      // What code in either process may hand its logger: requests, replies, errors, configs.
      cp.cp.ctx.log.error(
        {
          req: { headers: { authorization: `Bearer ${token}`, cookie: `doppio_session=${secrets[1]}` } },
          res: { headers: { "set-cookie": `doppio_session=${secrets[1]}; HttpOnly` } },
          body: { email: "a@b.c", password: PASSWORD },
          user: { passwordHash: "scrypt$hash-secret" },
          config: {
            serverToken: "dpa_server-secret",
            apiToken: "api-secret",
            metricsToken: "metrics-secret",
          },
          err: {
            message: "insert failed",
            params: ["token-hash-secret"],
            cause: { params: ["cause-secret"] },
          },
          box: { secrets: { db_password: "db-secret" }, metadata_token: "metadata-secret" },
        },
        "everything a careless call could pass",
      );
      secrets.push(
        "scrypt$hash-secret",
        "dpa_server-secret",
        "api-secret",
        "metrics-secret",
        "token-hash-secret",
        "cause-secret",
        "db-secret",
        "metadata-secret",
      );
    } finally {
      await cp.close();
    }
    const text = logs.text();
    expect(text).toContain("incoming request"); // the capture saw the requests
    expect(text).toContain("[redacted]");
    for (const secret of secrets)
      expect(text, `a log line holds ${secret.slice(0, 12)}…`).not.toContain(secret);
    const line = JSON.parse(text.split("\n").find((l) => l.includes("everything a careless call"))!);
    expect(line.body.email).toBe("a@b.c"); // only secrets go
    expect(line.err.message).toBe("insert failed");
  });

  it("keeps the OAuth callback's code and state out of the request log's URLs", async () => {
    const gh = new GitHubStandIn();
    await gh.start();
    const logs = capture();
    const cp = await startControlPlane({
      config: { logLevel: "info", ...githubConfig(gh) },
      logTo: logs.stream,
    });
    let code = "";
    let state = "";
    try {
      const user = gh.addUser("logged", [{ email: uniqueEmail("gh-log"), primary: true, verified: true }]);
      const flow = await oauthFlow(cp.url, gh, user);
      expect(flow.done.status).toBe(302);
      expect(flow.done.setCookies.some((c) => c.startsWith("doppio_session="))).toBe(true);
      const back = new URL(flow.callbackPath, cp.url);
      code = back.searchParams.get("code")!;
      state = back.searchParams.get("state")!;
      // A replay of the same callback is logged as well (and refused).
      await fetch(new URL(flow.callbackPath, cp.url), { redirect: "manual" });
    } finally {
      await cp.close();
      await gh.stop();
    }
    expect(code.length).toBeGreaterThan(8);
    expect(state.length).toBeGreaterThan(8);
    const text = logs.text();
    const callbacks = text.split("\n").filter((l) => l.includes("/api/v1/auth/github/callback"));
    expect(callbacks.length).toBeGreaterThanOrEqual(2);
    for (const l of callbacks) expect(JSON.parse(l).req.url).toContain("code=[redacted]");
    expect(text).not.toContain(code);
    expect(text).not.toContain(state);
  });

  it("redactUrl censors code and state however they are spelled, and nothing else", () => {
    expect(redactUrl("/cb?code=abc&state=def&x=1")).toBe("/cb?code=[redacted]&state=[redacted]&x=1");
    expect(redactUrl("/cb?%63ode=abc&STATE=def&codex=2#code=f")).toBe(
      "/cb?%63ode=[redacted]&STATE=[redacted]&codex=2#code=f",
    );
    expect(redactUrl("/cb?code&state=")).toBe("/cb?code=[redacted]&state=[redacted]");
    expect(redactUrl("/cb?%E0%A4%A=1&code=z")).toBe("/cb?%E0%A4%A=1&code=[redacted]");
    expect(redactUrl("/plain/path")).toBe("/plain/path");
  });

  it("redacts with the shared list alone, which is what the agent's logger is given", () => {
    const logs = capture();
    pino({ redact: LOG_REDACT }, logs.stream).info({
      agentToken: "dpa_x",
      req: { headers: { authorization: "y" } },
    });
    expect(logs.text()).not.toMatch(/dpa_x|"y"/);
  });
});
