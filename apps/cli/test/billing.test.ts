import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PASSWORD, TestClient, uniqueEmail } from "../../api/test/support/client.ts";
import { startControlPlane, type TestControlPlane } from "../../api/test/support/control-plane.ts";
import { buildCli, type CliHome, cliHome } from "./support/cli.ts";

describe("doppio wallet, usage, invoices", () => {
  let cp: TestControlPlane;
  let home: CliHome;
  let env: Record<string, string>;

  beforeAll(async () => {
    const [started] = await Promise.all([startControlPlane(), buildCli()]);
    cp = started;
    const user = new TestClient(cp.url);
    const email = uniqueEmail("wallet");
    expect((await user.post("/api/v1/auth/signup", { email, password: PASSWORD })).status).toBe(201);
    const token = await user.post("/api/v1/tokens", { name: "cli" });
    expect(token.status).toBe(201);
    // Spend some of the trial so the figures are not all round.
    const admin = await cp.admin();
    expect(
      (await admin.post("/api/v1/billing/adjustments", { email, amount: -766, memo: "spent" })).status,
    ).toBe(201);
    env = { DOPPIO_URL: cp.url, DOPPIO_TOKEN: token.body.token };
    home = await cliHome();
  });

  afterAll(async () => {
    await cp?.close();
    await home?.cleanup();
  });

  it("prints the balance as integer minor units in JSON and as money for people", async () => {
    const json = await home.run(["wallet", "--json"], { env });
    expect(json.stderr).toBe("");
    expect(json.code).toBe(0);
    const w = JSON.parse(json.stdout);
    expect(w).toMatchObject({
      balance: 1234,
      currency: "EUR",
      burnRatePerHour: 0,
      hoursLeft: null,
      boxes: [],
    });
    const text = await home.run(["wallet"], { env });
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(/^balance: +12\.34 EUR$/m);
    expect(text.stdout).toMatch(/card top-ups: +not configured/);
  });

  it("lists usage and invoices (empty for a new account)", async () => {
    const usage = await home.run(["usage"], { env });
    expect(usage.code).toBe(0);
    expect(usage.stdout.split("\n")[0]).toMatch(/^BOX +SIZE +STATUS +HOURS +COMPUTE +STORAGE +NOW$/);
    const invoices = await home.run(["invoices", "--json"], { env });
    expect(invoices.code).toBe(0);
    expect(JSON.parse(invoices.stdout)).toEqual([]);
  });

  it("needs a sign-in like every other command", async () => {
    const r = await home.run(["wallet"], { env: { ...env, DOPPIO_TOKEN: "dpb_not_a_real_token" } });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/doppio login/);
  });
});
