import { and, eq } from "drizzle-orm";
import { afterEach, describe, expect, it } from "vitest";
import { appendEntry } from "../src/billing/ledger.ts";
import { meter, type PriceVersion, type StatusChange } from "../src/billing/metering.ts";
import { settleBox } from "../src/billing/settle.ts";
import { boxes, ledgerEntries, usageSettlements } from "../src/db/schema.ts";
import { me, TestClock, useClock } from "./support/billing.ts";
import { signedInClient } from "./support/client.ts";
import { DB_KINDS, dbUnavailable, startControlPlane } from "./support/control-plane.ts";
import { describeOnEachDb } from "./support/each-db.ts";

const H = 3_600_000;
const zero = { compute: 0n, storage: 0n };
const price = (from: string, computePerHour: number, storagePerGbMonth = 0): PriceVersion => ({
  effectiveFrom: new Date(from),
  computePerHour,
  storagePerGbMonth,
});
const at = (status: StatusChange["status"], when: string, diskGb = 10): StatusChange => ({
  status,
  diskGb,
  at: new Date(when),
});
const total = (ps: ReturnType<typeof meter>) => ps.reduce((n, p) => n + p.computeAmount + p.storageAmount, 0);

describe("metering (pure)", () => {
  it("prices each stretch with the price in force at its start", () => {
    const history = [at("running", "2026-03-10T10:00:00Z")];
    const prices = [price("1970-01-01T00:00:00Z", 100), price("2026-03-10T12:00:00Z", 400)];
    const [p] = meter(
      history,
      prices,
      new Date("2026-03-10T10:00:00Z"),
      new Date("2026-03-10T14:00:00Z"),
      zero,
    );
    // 2 h at 100 + 2 h at 400
    expect(p!.computeAmount).toBe(1000);
    expect(p!.computeMs).toBe(4 * H);
  });

  it("bills compute only while running and storage in every state but deleted", () => {
    const history = [
      at("running", "2026-03-10T00:00:00Z"),
      at("stopped", "2026-03-10T01:00:00Z"),
      at("deleted", "2026-03-10T03:00:00Z"),
    ];
    // 10 GB at 720 per GB-month = 10 per hour of storage; compute 60 per hour.
    const prices = [price("1970-01-01T00:00:00Z", 60, 720)];
    const [p] = meter(
      history,
      prices,
      new Date("2026-03-10T00:00:00Z"),
      new Date("2026-03-10T05:00:00Z"),
      zero,
    );
    expect(p!.computeAmount).toBe(60);
    expect(p!.storageAmount).toBe(30);
    expect(p!.storageGbMs).toBe(3 * H * 10);
  });

  it("cuts usage at month boundaries (UTC) into one period per month", () => {
    const history = [at("running", "2026-01-31T23:00:00Z")];
    const periods = meter(
      history,
      [price("1970-01-01T00:00:00Z", 100)],
      new Date("2026-01-31T23:00:00Z"),
      new Date("2026-02-01T02:00:00Z"),
      zero,
    );
    expect(periods.map((p) => [p.start.toISOString(), p.end.toISOString(), p.computeAmount])).toEqual([
      ["2026-01-31T23:00:00.000Z", "2026-02-01T00:00:00.000Z", 100],
      ["2026-02-01T00:00:00.000Z", "2026-02-01T02:00:00.000Z", 200],
    ]);
  });

  it("loses and invents nothing when settled in many small pieces (the carry)", () => {
    const history = [at("running", "2026-03-01T00:00:00Z")];
    const prices = [price("1970-01-01T00:00:00Z", 7, 3)];
    const from = new Date("2026-03-01T00:00:00Z");
    const to = new Date("2026-03-03T05:17:00Z");
    const once = total(meter(history, prices, from, to, zero));
    let carry = zero;
    let pieces = 0;
    let t = from.getTime();
    for (let i = 1; t < to.getTime(); i++) {
      const next = Math.min(to.getTime(), t + ((i * 7919) % 600_000) + 1000);
      const ps = meter(history, prices, new Date(t), new Date(next), carry);
      pieces += total(ps);
      carry = ps.at(-1)!.carry;
      t = next;
    }
    expect(pieces).toBe(once);
    // exact: 3197 min × 7/60 per min compute, 10 GB × 3197 min × 3/43200 storage; each rounded down
    const minutes = 53 * 60 + 17;
    expect(once).toBe(Math.floor((minutes * 7) / 60) + Math.floor((10 * minutes * 3) / 43_200));
  });
});

describeOnEachDb("metering on the database", (env) => {
  let restore = () => {};
  afterEach(() => restore());

  /** A box of `owner` placed nowhere, its statuses written as the services write them (updated_at = clock). */
  async function makeBox(clock: TestClock, ownerTag: string) {
    const owner = await signedInClient(env().url, ownerTag);
    const { id: userId, teamId } = await me(owner);
    const db = env().cp.ctx.db;
    const boxId = crypto.randomUUID();
    await db.insert(boxes).values({
      id: boxId,
      slug: `m-${boxId.slice(0, 8)}`,
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
    const setStatus = (status: "stopped" | "running" | "deleted") =>
      db.update(boxes).set({ status, updatedAt: clock.now() }).where(eq(boxes.id, boxId));
    const usage = () =>
      db
        .select()
        .from(ledgerEntries)
        .where(and(eq(ledgerEntries.boxId, boxId), eq(ledgerEntries.kind, "usage")));
    return { userId, boxId, setStatus, usage };
  }

  it("debits each interval once: settling twice, or concurrently, changes nothing", async () => {
    const clock = new TestClock("2030-05-10T10:00:00Z");
    restore = useClock(env(), clock);
    const { boxId, usage } = await makeBox(clock, "twice");
    clock.advance(3 * H);
    await Promise.all([settleBox(env().cp.ctx, boxId), settleBox(env().cp.ctx, boxId)]);
    await settleBox(env().cp.ctx, boxId);
    const rows = await usage();
    // small: 4 per hour compute, 10 GB × 10 per GB-month storage = 100/720 per hour
    expect(rows.map((r) => r.amount)).toEqual([-(3 * 4 + Math.floor((3 * 100) / 720))]);
    clock.advance(H);
    await settleBox(env().cp.ctx, boxId);
    expect((await usage()).length).toBe(2);
  });

  it("follows status changes and a price change in the middle of an interval", async () => {
    const clock = new TestClock("2030-06-10T00:00:00Z");
    restore = useClock(env(), clock);
    const admin = await env().admin();
    const { boxId, setStatus, usage } = await makeBox(clock, "pricechange");
    // From 02:00 small costs 40 per hour (an admin adds the version ahead of time).
    const set = await admin.post("/api/v1/billing/prices", {
      size: "small",
      computePerHour: 40,
      storagePerGbMonth: 0,
      effectiveFrom: "2030-06-10T02:00:00Z",
    });
    expect(set.status).toBe(201);
    clock.advance(H);
    await setStatus("stopped"); // 00:00–01:00 running at 4
    clock.advance(H);
    await setStatus("running"); // 01:00–02:00 stopped (storage only)
    clock.advance(2 * H); // 02:00–04:00 running at 40
    await settleBox(env().cp.ctx, boxId);
    const settled = await env()
      .cp.ctx.db.select()
      .from(usageSettlements)
      .where(eq(usageSettlements.boxId, boxId));
    expect(settled.map((s) => [s.computeMs, s.computeAmount])).toEqual([[3 * H, 4 + 80]]);
    const rows = await usage();
    expect(rows.reduce((n, r) => n + r.amount, 0)).toBe(-(84 + Math.floor((3 * 100) / 720 + 100 / 720)));
    expect(
      (await env().cp.ctx.db.select().from(usageSettlements).where(eq(usageSettlements.boxId, boxId))).length,
    ).toBe(1);
  });

  it("splits a running interval at the month boundary and stops billing at deletion", async () => {
    const clock = new TestClock("2030-07-31T22:00:00Z");
    restore = useClock(env(), clock);
    const { boxId, setStatus } = await makeBox(clock, "month");
    clock.advance(4 * H);
    await setStatus("deleted");
    clock.advance(10 * H);
    await settleBox(env().cp.ctx, boxId);
    const rows = await env()
      .cp.ctx.db.select()
      .from(usageSettlements)
      .where(eq(usageSettlements.boxId, boxId))
      .orderBy(usageSettlements.periodStart);
    expect(rows.map((r) => [r.periodStart.toISOString(), r.periodEnd.toISOString(), r.computeMs])).toEqual([
      ["2030-07-31T22:00:00.000Z", "2030-08-01T00:00:00.000Z", 2 * H],
      ["2030-08-01T00:00:00.000Z", "2030-08-01T02:00:00.000Z", 2 * H],
    ]);
    const refused = await env()
      .cp.ctx.db.delete(usageSettlements)
      .where(eq(usageSettlements.boxId, boxId))
      .then(
        () => null,
        (e: Error) => e,
      );
    expect(String((refused?.cause as Error | undefined)?.message)).toMatch(/append-only/);
  });

  it("keeps the cached balance equal to the ledger after settlements", async () => {
    const clock = new TestClock("2030-09-01T00:00:00Z");
    restore = useClock(env(), clock);
    const { userId, boxId } = await makeBox(clock, "sum");
    for (let i = 0; i < 5; i++) {
      clock.advance(37 * 60_000);
      await settleBox(env().cp.ctx, boxId);
      await env().cp.ctx.db.transaction((tx) =>
        appendEntry(tx, { userId, kind: "topup", amount: 3, key: `sum:${userId}:${i}`, at: clock.now() }),
      );
    }
    const ledger = await env().cp.ctx.db.select().from(ledgerEntries).where(eq(ledgerEntries.userId, userId));
    const { balanceOf } = await import("../src/billing/ledger.ts");
    expect(await balanceOf(env().cp.ctx.db, userId)).toBe(ledger.reduce((n, e) => n + e.amount, 0));
  });
});

// A restart: the settlement cursor lives in the database, so a new process continues it.
for (const kind of DB_KINDS.filter((k) => k === "pglite")) {
  describe.skipIf(dbUnavailable(kind) !== null)(`metering across a restart [${kind}]`, () => {
    it("a restarted control plane settles only what the first one had not", async () => {
      const { mkdtemp, rm } = await import("node:fs/promises");
      const { tmpdir } = await import("node:os");
      const dataDir = await mkdtemp(`${tmpdir()}/doppio-billing-restart-`);
      const clock = new TestClock("2030-10-01T00:00:00Z");
      let boxId = "";
      try {
        const first = await startControlPlane({ kind, dataDir });
        useClock(first, clock);
        const owner = await signedInClient(first.url, "restart");
        const { id: userId, teamId } = await me(owner);
        boxId = crypto.randomUUID();
        await first.cp.ctx.db.insert(boxes).values({
          id: boxId,
          slug: "restart-box",
          teamId,
          ownerId: userId,
          template: "minimal",
          templateVersion: "1",
          size: "medium",
          vcpu: 2,
          memoryMb: 4096,
          diskGb: 20,
          desiredState: "running",
          status: "running",
          createdAt: clock.now(),
          updatedAt: clock.now(),
        });
        clock.advance(2 * H);
        await settleBox(first.cp.ctx, boxId);
        await first.close();

        const second = await startControlPlane({ kind, dataDir });
        useClock(second, clock);
        await settleBox(second.cp.ctx, boxId); // same moment: nothing more
        clock.advance(H);
        await settleBox(second.cp.ctx, boxId);
        const rows = await second.cp.ctx.db
          .select()
          .from(usageSettlements)
          .where(eq(usageSettlements.boxId, boxId))
          .orderBy(usageSettlements.periodStart);
        expect(rows.map((r) => r.computeMs)).toEqual([2 * H, H]);
        expect(rows.reduce((n, r) => n + r.computeAmount, 0)).toBe(3 * 8);
        await second.close();
      } finally {
        await rm(dataDir, { recursive: true, force: true });
      }
      // Two PGlite starts, each applying every migration: slow on a loaded machine.
    }, 120_000);
  });
}
