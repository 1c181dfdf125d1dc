import { Writable } from "node:stream";
import { LOG_REDACT } from "@doppio/contracts";
import { pino } from "pino";
import { describe, expect, it } from "vitest";
import { heartbeat, PASSWORD, registerServer, TestClient, uniqueEmail } from "./support/client.ts";
import { ADMIN_PASSWORD, startControlPlane } from "./support/control-plane.ts";

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

  it("redacts with the shared list alone, which is what the agent's logger is given", () => {
    const logs = capture();
    pino({ redact: LOG_REDACT }, logs.stream).info({
      agentToken: "dpa_x",
      req: { headers: { authorization: "y" } },
    });
    expect(logs.text()).not.toMatch(/dpa_x|"y"/);
  });
});
