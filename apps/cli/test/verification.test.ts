import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PASSWORD, TestClient, uniqueEmail } from "../../api/test/support/client.ts";
import { startControlPlane, type TestControlPlane } from "../../api/test/support/control-plane.ts";
import { buildCli, type CliHome, cliHome } from "./support/cli.ts";

describe("doppio whoami, verify-email resend, admin verify-email", () => {
  let cp: TestControlPlane;
  let home: CliHome;
  let userEnv: Record<string, string>;
  let adminEnv: Record<string, string>;
  const email = uniqueEmail("cli-verify");

  beforeAll(async () => {
    // Verification required without a mail transport: links go to the control plane's log.
    const [started] = await Promise.all([
      startControlPlane({ config: { emailVerification: "required" } }),
      buildCli(),
    ]);
    cp = started;
    const user = new TestClient(cp.url);
    expect((await user.post("/api/v1/auth/signup", { email, password: PASSWORD })).status).toBe(201);
    const token = await user.post("/api/v1/tokens", { name: "cli" });
    const admin = await cp.admin();
    const adminToken = await admin.post("/api/v1/tokens", { name: "cli" });
    userEnv = { DOPPIO_URL: cp.url, DOPPIO_TOKEN: token.body.token };
    adminEnv = { DOPPIO_URL: cp.url, DOPPIO_TOKEN: adminToken.body.token };
    home = await cliHome();
  });

  afterAll(async () => {
    await cp?.close();
    await home?.cleanup();
  });

  it("shows an unverified account, resends its link, and lets an administrator (only) verify it with its trial", async () => {
    const who = await home.run(["whoami"], { env: userEnv });
    expect(who.code).toBe(0);
    expect(who.stdout).toMatch(/^verified: +no \(no trial credit yet: doppio verify-email resend\)$/m);
    expect(JSON.parse((await home.run(["whoami", "--json"], { env: userEnv })).stdout).emailVerified).toBe(
      false,
    );

    const resend = await home.run(["verify-email", "resend"], { env: userEnv });
    expect(resend.code).toBe(0);
    expect(resend.stdout).toContain("a new verification link is on its way");

    const refused = await home.run(["admin", "verify-email", email], { env: userEnv });
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toMatch(/admin/i);

    const marked = await home.run(["admin", "verify-email", email.toUpperCase()], { env: adminEnv });
    expect(marked.stderr).toBe("");
    expect(marked.code).toBe(0);
    expect(marked.stdout).toMatch(/^verified: +yes$/m);
    expect((await home.run(["whoami"], { env: userEnv })).stdout).toMatch(/^verified: +yes$/m);
    expect(JSON.parse((await home.run(["wallet", "--json"], { env: userEnv })).stdout).balance).toBe(2000);

    const again = await home.run(["verify-email", "resend"], { env: userEnv });
    expect(again.code).not.toBe(0);
    expect(again.stderr).toContain("already verified");
  });
});
