import { eq } from "drizzle-orm";
import { afterEach, expect, it } from "vitest";
import { runBilling } from "../src/billing/loop.ts";
import { boxes, invoices } from "../src/db/schema.ts";
import { me, TestClock, useClock } from "./support/billing.ts";
import { signedInClient } from "./support/client.ts";
import { describeOnEachDb } from "./support/each-db.ts";

const H = 3_600_000;

describeOnEachDb("invoices", (env) => {
  let restore = () => {};
  afterEach(() => restore());

  it("issues one immutable invoice per user per ended month, readable only by its owner and admins", async () => {
    const clock = new TestClock("2031-01-31T19:00:00Z");
    restore = useClock(env(), clock);
    const owner = await signedInClient(env().url, "invoiced");
    const stranger = await signedInClient(env().url, "stranger");
    const admin = await env().admin();
    const { id: userId, teamId } = await me(owner);
    clock.advance(H);
    await env().cp.ctx.db.insert(boxes).values({
      id: crypto.randomUUID(),
      slug: "inv-box",
      teamId,
      ownerId: userId,
      template: "minimal",
      templateVersion: "1",
      size: "small",
      vcpu: 1,
      memoryMb: 2048,
      diskGb: 10,
      desiredState: "running",
      status: "running",
      createdAt: clock.now(),
      updatedAt: clock.now(),
    });
    clock.set("2031-02-01T01:00:00Z");
    await runBilling(env().cp.ctx);
    await runBilling(env().cp.ctx);
    restore(); // sessions are checked against the real clock again

    const list = await owner.get("/api/v1/billing/invoices");
    expect(list.status).toBe(200);
    expect(list.body.invoices.map((i: { month: string }) => i.month)).toEqual(["2031-01"]);
    const [inv] = list.body.invoices;
    // 20:00–24:00 running: 4 h × 4 compute; storage 10 GB × 4 h × 10 per GB-month (720 h) rounds to 0.
    expect(inv.usageTotal).toBe(16);
    expect(inv.creditsTotal).toBe(2000);
    expect(inv.lines).toEqual([
      { box: "inv-box", description: "inv-box: compute", quantityMilli: 4000, unit: "hours", amount: 16 },
      { box: "inv-box", description: "inv-box: storage", quantityMilli: 56, unit: "GB-months", amount: 0 },
      {
        box: null,
        description: "Trial credit: trial credit",
        quantityMilli: 1000,
        unit: "credit",
        amount: 2000,
      },
    ]);

    expect((await owner.get(`/api/v1/billing/invoices/${inv.id}`)).body).toEqual(inv);
    expect((await admin.get(`/api/v1/billing/invoices/${inv.id}`)).status).toBe(200);
    const theirs = await stranger.get(`/api/v1/billing/invoices/${inv.id}`);
    expect(theirs.status).toBe(404);
    expect(theirs.body.error.code).toBe("not_found");
    // The stranger has an invoice of their own (their trial), never the owner's.
    const strangers = (await stranger.get("/api/v1/billing/invoices")).body.invoices;
    expect(strangers.map((i: { id: string; usageTotal: number }) => [i.id === inv.id, i.usageTotal])).toEqual(
      [[false, 0]],
    );
    expect((await owner.get("/api/v1/billing/invoices/not-an-invoice")).status).toBe(404);

    const html = await owner.request("GET", `/api/v1/billing/invoices/${inv.id}/html`);
    expect(html.status).toBe(200);
    expect(html.headers.get("content-type")).toMatch(/^text\/html/);
    expect(String(html.body)).toContain("inv-box: compute");
    expect(String(html.body)).toContain("0.16 EUR");
    expect((await stranger.request("GET", `/api/v1/billing/invoices/${inv.id}/html`)).status).toBe(404);

    const changed = await env()
      .cp.ctx.db.update(invoices)
      .set({ usageTotal: 0 })
      .where(eq(invoices.id, inv.id))
      .then(
        () => null,
        (e: Error) => e,
      );
    expect(String((changed?.cause as Error | undefined)?.message)).toMatch(/append-only/);
    expect((await owner.get(`/api/v1/billing/invoices/${inv.id}`)).body.usageTotal).toBe(16);
  });
});
