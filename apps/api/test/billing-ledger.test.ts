import { sql } from "drizzle-orm";
import { afterEach, expect, it } from "vitest";
import { appendEntry, balanceOf, inconsistentWallets } from "../src/billing/ledger.ts";
import { expireTrials } from "../src/billing/trial.ts";
import { me, TestClock, useClock, wallet } from "./support/billing.ts";
import { signedInClient, type TestClient } from "./support/client.ts";
import { describeOnEachDb } from "./support/each-db.ts";

const DAY = 86_400_000;

describeOnEachDb("billing ledger", (env) => {
  let restoreClock = () => {};
  afterEach(() => restoreClock());

  it("grants the trial credit once at signup, with the date it expires", async () => {
    const user = await signedInClient(env().url, "trial");
    const w = await wallet(user);
    expect(w.balance).toBe(2000);
    expect(w.currency).toBe("EUR");
    expect(w.cardTopUps).toBe(false);
    const ledger = await user.get("/api/v1/billing/ledger");
    expect(ledger.status).toBe(200);
    expect(ledger.body.entries).toHaveLength(1);
    const [trial] = ledger.body.entries;
    expect(trial.kind).toBe("trial");
    expect(trial.amount).toBe(2000);
    expect(new Date(trial.expiresAt).getTime() - new Date(trial.at).getTime()).toBe(30 * DAY);
    // A second grant for the same account is the same ledger key: nothing changes.
    const { id } = await me(user);
    const again = await env().cp.ctx.db.transaction((tx) =>
      appendEntry(tx, { userId: id, kind: "trial", amount: 2000, key: `trial:${id}`, at: new Date() }),
    );
    expect(again).toBeNull();
    expect((await wallet(user)).balance).toBe(2000);
  });

  it("refuses UPDATE, DELETE and TRUNCATE of the ledger, settlements and invoices in the database itself", async () => {
    const user = await signedInClient(env().url, "append");
    const { id } = await me(user);
    const db = env().cp.ctx.db;
    const refused = async (statement: ReturnType<typeof sql>) => {
      const err = await db.execute(statement).then(
        () => null,
        (e: Error) => e,
      );
      // drizzle wraps the database's error; the trigger's message is its cause.
      expect(String((err?.cause as Error | undefined)?.message ?? err?.message)).toMatch(/append-only/);
    };
    await refused(sql`UPDATE ledger_entries SET amount = 1000000 WHERE user_id = ${id}`);
    await refused(sql`DELETE FROM ledger_entries WHERE user_id = ${id}`);
    await refused(sql`TRUNCATE ledger_entries CASCADE`);
    // Row triggers need rows: settlement and invoice rows are attacked in their own tests.
    await refused(sql`TRUNCATE usage_settlements`);
    await refused(sql`TRUNCATE invoices`);
    expect((await wallet(user)).balance).toBe(2000);
  });

  it("keeps the balance right while debits and top-ups race (each in its own transaction)", async () => {
    const user = await signedInClient(env().url, "race");
    const { id } = await me(user);
    const db = env().cp.ctx.db;
    const append = (amount: number, key: string) =>
      db.transaction((tx) =>
        appendEntry(tx, { userId: id, kind: amount > 0 ? "topup" : "usage", amount, key, at: new Date() }),
      );
    for (let round = 0; round < 15; round++) {
      await Promise.all([
        append(-300, `race:${id}:${round}:a`),
        append(-200, `race:${id}:${round}:b`),
        append(1000, `race:${id}:${round}:c`),
      ]);
    }
    const expected = 2000 + 15 * (1000 - 300 - 200);
    expect(await balanceOf(db, id)).toBe(expected);
    expect((await wallet(user)).balance).toBe(expected);
    expect((await inconsistentWallets(db)).filter((w) => w.userId === id)).toEqual([]);
  });

  it("takes back what is left of the trial when it expires, once", async () => {
    const clock = new TestClock(new Date());
    restoreClock = useClock(env(), clock);
    const admin = await env().admin();
    const saver = await signedInClient(env().url, "saver");
    const spender = await signedInClient(env().url, "spender");
    const payer = await signedInClient(env().url, "payer");
    const [s, p, t] = [await me(saver), await me(spender), await me(payer)];
    // The payer spent 1500 of the trial, then paid 1000 in: only the trial's 500 may expire.
    expect(
      (await admin.post("/api/v1/billing/adjustments", { email: t.email, amount: -1500, memo: "used" }))
        .status,
    ).toBe(201);
    expect(
      (await admin.post("/api/v1/billing/adjustments", { email: t.email, amount: 1000, memo: "paid" }))
        .status,
    ).toBe(201);
    // The saver also got 500 from an admin (not trial money); the spender used 1500 of the trial.
    expect(
      (await admin.post("/api/v1/billing/adjustments", { email: s.email, amount: 500, memo: "goodwill" }))
        .status,
    ).toBe(201);
    expect(
      (await admin.post("/api/v1/billing/adjustments", { email: p.email, amount: -1500, memo: "used" }))
        .status,
    ).toBe(201);

    clock.advance(29 * DAY);
    const early = await expireTrials(env().cp.ctx);
    expect(early.filter((m) => m.userId === s.id || m.userId === p.id)).toEqual([]);

    clock.advance(2 * DAY);
    await expireTrials(env().cp.ctx);
    await expireTrials(env().cp.ctx);
    restoreClock(); // sessions do not outlive a month of test time
    expect((await wallet(saver)).balance).toBe(500);
    expect((await wallet(spender)).balance).toBe(0);
    expect((await wallet(payer)).balance).toBe(1000);
    const expiries = (await saver.get("/api/v1/billing/ledger?kind=trial_expiry")).body.entries;
    expect(expiries).toHaveLength(1);
    expect(expiries[0].amount).toBe(-2000);
    const spent = (await spender.get("/api/v1/billing/ledger?kind=trial_expiry")).body.entries;
    expect(spent.map((e: { amount: number }) => e.amount)).toEqual([-500]);
  });

  it("lets only administrators adjust wallets and set prices; a price cannot start in the past", async () => {
    const admin = await env().admin();
    const user: TestClient = await signedInClient(env().url, "prices");
    const { email } = await me(user);
    expect(
      (await user.post("/api/v1/billing/adjustments", { email, amount: 100000, memo: "free money" })).status,
    ).toBe(403);
    expect(
      (await admin.post("/api/v1/billing/adjustments", { email: "nobody@example.com", amount: 5, memo: "x" }))
        .status,
    ).toBe(404);
    expect(
      (await admin.post("/api/v1/billing/adjustments", { email, amount: 1.5, memo: "float" })).status,
    ).toBe(400);

    const prices = await user.get("/api/v1/billing/prices");
    expect(prices.status).toBe(200);
    expect(prices.body.current.map((p: { size: string }) => p.size).sort()).toEqual([
      "large",
      "medium",
      "small",
    ]);
    const body = { size: "small", computePerHour: 6, storagePerGbMonth: 12 };
    expect((await user.post("/api/v1/billing/prices", body)).status).toBe(403);
    const past = await admin.post("/api/v1/billing/prices", {
      ...body,
      effectiveFrom: "2020-01-01T00:00:00Z",
    });
    expect(past.status).toBe(400);
    expect((await admin.post("/api/v1/billing/prices", { ...body, computePerHour: 0.5 })).status).toBe(400);
    const later = new Date(Date.now() + DAY).toISOString();
    const set = await admin.post("/api/v1/billing/prices", { ...body, effectiveFrom: later });
    expect(set.status).toBe(201);
    const after = (await user.get("/api/v1/billing/prices")).body;
    expect(after.current.find((p: { size: string }) => p.size === "small").computePerHour).toBe(4);
    expect(after.history.filter((p: { size: string }) => p.size === "small")).toHaveLength(2);
  });

  it("explains that card payments are not configured when Stripe keys are missing", async () => {
    const user = await signedInClient(env().url, "nocard");
    const res = await user.post("/api/v1/billing/topups", { amount: 1000 });
    expect(res.status).toBe(409);
    expect(res.body.error.code).toBe("not_configured");
    expect(res.body.error.message).toMatch(/card payments are not configured/);
  });
});
