import { WalletEvent } from "@doppio/contracts";
import { eq } from "drizzle-orm";
import { expect, it } from "vitest";
import type { WalletNotifier } from "../src/billing/funds.ts";
import { usageSettlements } from "../src/db/schema.ts";
import { finishNextJob, me, wallet } from "./support/billing.ts";
import { heartbeat, registerServer, signedInClient, type TestClient } from "./support/client.ts";
import { describeOnEachDb } from "./support/each-db.ts";

/** Reads a team's event stream and collects its `wallet` events. */
function walletEvents(client: TestClient) {
  const events: unknown[] = [];
  const abort = new AbortController();
  const done = (async () => {
    const res = await client.open("/api/v1/events", { accept: "text/event-stream" }, abort.signal);
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += decoder.decode(value, { stream: true });
      let cut = buf.indexOf("\n\n");
      while (cut >= 0) {
        const block = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        if (/^event: wallet$/m.test(block)) {
          const data = /^data: (.*)$/m.exec(block)![1]!;
          events.push(WalletEvent.parse(JSON.parse(data)));
        }
        cut = buf.indexOf("\n\n");
      }
    }
  })().catch(() => {});
  return {
    events,
    async waitFor(n: number) {
      for (let i = 0; i < 200 && events.length < n; i++) await new Promise((r) => setTimeout(r, 50));
      return events;
    },
    close() {
      abort.abort();
      return done;
    },
  };
}

describeOnEachDb("wallet warnings, stop at zero, 402", (env) => {
  it("warns at the threshold, stops the owner's running boxes at zero through a stop job, refuses create and start with 402, and starts again after a credit", async () => {
    const admin = await env().admin();
    const agent = await registerServer(admin, "bill-01");
    expect((await agent.post("/agent/v1/heartbeat", heartbeat())).status).toBe(200);
    env().cp.startBilling();
    const warned: Array<{ email: string; state: string }> = [];
    const notifier: WalletNotifier = {
      async walletWarning(user, event) {
        warned.push({ email: user.email, state: event.state });
      },
      async topUpFailed() {},
    };
    env().cp.ctx.walletNotifier = notifier;

    const user = await signedInClient(env().url, "funds");
    const other = await signedInClient(env().url, "bystander");
    const { email } = await me(user);
    expect((await user.post("/api/v1/boxes", { template: "minimal", name: "fund-a" })).status).toBe(202);
    await finishNextJob(agent);
    expect((await other.post("/api/v1/boxes", { template: "minimal", name: "fund-b" })).status).toBe(202);
    await finishNextJob(agent);
    expect((await user.get("/api/v1/boxes/fund-a")).body.status).toBe("running");

    // The box's state changes were settled as they happened (the bus listener).
    const boxId = (await env().cp.ctx.db.query.boxes.findFirst({
      where: (b, { eq }) => eq(b.slug, "fund-a"),
    }))!.id;
    for (let i = 0; i < 100; i++) {
      const rows = await env()
        .cp.ctx.db.select()
        .from(usageSettlements)
        .where(eq(usageSettlements.boxId, boxId));
      if (rows.length > 0) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(
      (await env().cp.ctx.db.select().from(usageSettlements).where(eq(usageSettlements.boxId, boxId))).length,
    ).toBeGreaterThan(0);

    const w = await wallet(user);
    expect(w.burnRatePerHour).toBe(4); // small: 4/h compute + 10 GB storage (100/720 per hour)
    expect(w.boxes.map((b: { slug: string }) => b.slug)).toEqual(["fund-a"]);
    expect(w.hoursLeft).toBeGreaterThan(400);

    const stream = walletEvents(user);
    await new Promise((r) => setTimeout(r, 200));
    const balance = w.balance;
    const low = await admin.post("/api/v1/billing/adjustments", {
      email,
      amount: 150 - balance,
      memo: "test low",
    });
    expect(low.status).toBe(201);
    const [lowEvent] = await stream.waitFor(1);
    expect(lowEvent).toMatchObject({ state: "low", balance: 150 });
    expect((await wallet(user)).low).toBe(true);

    const empty = await admin.post("/api/v1/billing/adjustments", {
      email,
      amount: -150,
      memo: "test empty",
    });
    expect(empty.status).toBe(201);
    const events = await stream.waitFor(2);
    expect(events[1]).toMatchObject({ state: "empty", balance: 0 });
    expect(warned.filter((x) => x.email === email).map((x) => x.state)).toEqual(["low", "empty"]);
    await stream.close();

    // The stop went through the ordinary job path; the box and its volume are kept.
    expect((await user.get("/api/v1/boxes/fund-a")).body.status).toBe("stopping");
    const job = await finishNextJob(agent);
    expect(job).toMatchObject({ action: "stop", slug: "fund-a" });
    const stopped = await user.get("/api/v1/boxes/fund-a");
    expect(stopped.status).toBe(200);
    expect(stopped.body.status).toBe("stopped");
    // Someone else's box runs on.
    expect((await other.get("/api/v1/boxes/fund-b")).body.status).toBe("running");

    const start = await user.post("/api/v1/boxes/fund-a/start");
    expect(start.status).toBe(402);
    expect(start.body.error.code).toBe("payment_required");
    expect(start.body.error.message).toMatch(/top up/);
    const create = await user.post("/api/v1/boxes", { template: "minimal", name: "fund-c" });
    expect(create.status).toBe(402);
    expect((await user.get("/api/v1/boxes")).body.boxes).toHaveLength(1);

    expect(
      (await admin.post("/api/v1/billing/adjustments", { email, amount: 1000, memo: "top" })).status,
    ).toBe(201);
    expect((await wallet(user)).low).toBe(false);
    expect((await user.post("/api/v1/boxes/fund-a/start")).status).toBe(202);
  });
});

describeOnEachDb("a box starting when the wallet runs out", (env) => {
  it("is stopped as soon as its start finishes, not at the next billing pass", async () => {
    const admin = await env().admin();
    const agent = await registerServer(admin, "bill-02");
    expect((await agent.post("/agent/v1/heartbeat", heartbeat())).status).toBe(200);
    // The periodic pass runs every settleIntervalMs (2 minutes here): only the state-change
    // listener can act within this test.
    env().cp.startBilling();
    const user = await signedInClient(env().url, "starting");
    const { email } = await me(user);
    expect((await user.post("/api/v1/boxes", { template: "minimal", name: "start-a" })).status).toBe(202);
    await finishNextJob(agent);
    expect((await user.post("/api/v1/boxes/start-a/stop")).status).toBe(202);
    expect(await finishNextJob(agent)).toMatchObject({ action: "stop", slug: "start-a" });
    expect((await user.post("/api/v1/boxes/start-a/start")).status).toBe(202);
    expect((await user.get("/api/v1/boxes/start-a")).body.status).toBe("starting");

    // The wallet runs out while the start job is under way: a starting box cannot be stopped.
    const balance = (await wallet(user)).balance;
    expect(
      (await admin.post("/api/v1/billing/adjustments", { email, amount: -balance, memo: "spent" })).status,
    ).toBe(201);
    expect((await user.get("/api/v1/boxes/start-a")).body.status).toBe("starting");

    // The start finishes: the box is stopped at once through the ordinary stop job.
    expect(await finishNextJob(agent)).toMatchObject({ action: "start", slug: "start-a" });
    let status = "";
    for (let i = 0; i < 200 && status !== "stopping"; i++) {
      status = (await user.get("/api/v1/boxes/start-a")).body.status;
      if (status !== "stopping") await new Promise((r) => setTimeout(r, 50));
    }
    expect(status).toBe("stopping");
    expect(await finishNextJob(agent)).toMatchObject({ action: "stop", slug: "start-a" });
    expect((await user.get("/api/v1/boxes/start-a")).body.status).toBe("stopped");
    expect((await user.post("/api/v1/boxes/start-a/start")).status).toBe(402);
  });
});
