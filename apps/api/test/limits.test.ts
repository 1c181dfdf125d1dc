import net from "node:net";
import { setTimeout as sleep, setImmediate as tick } from "node:timers/promises";
import type { Box } from "@doppio/contracts";
import { eq } from "drizzle-orm";
import { expect, it } from "vitest";
import { serializeIn } from "../src/db/exclusive.ts";
import { rateWindows, servers } from "../src/db/schema.ts";
import { RateWindow } from "../src/services/rate-limits.ts";
import { heartbeat, registerServer, signedInClient, TestClient } from "./support/client.ts";
import { describeOnEachDb } from "./support/each-db.ts";
import { advisoryLockWaiters } from "./support/locks.ts";

const LIMITS = {
  boxQuotaPerUser: 2,
  boxCreatesPerMinute: 3,
  streamsPerUser: 3,
  streamBufferBytes: 256 * 1024,
};

/** One sample of a metric from the control plane's /metrics. */
async function metric(url: string, name: string): Promise<number> {
  const text = (await new TestClient(url).get("/metrics")).body as string;
  return Number(new RegExp(`^${name} (\\S+)$`, "m").exec(text)?.[1] ?? Number.NaN);
}

describeOnEachDb(
  "per-user limits",
  (env) => {
    it("caps the boxes one user may have with a clear 403, and no one else's", async () => {
      const agent = await registerServer(await env().admin(), "fc-limits");
      await agent.post("/agent/v1/heartbeat", heartbeat());
      const user = await signedInClient(env().url, "quota");
      expect((await user.post("/api/v1/boxes", { template: "minimal", name: "quota-1" })).status).toBe(202);
      expect((await user.post("/api/v1/boxes", { template: "minimal", name: "quota-2" })).status).toBe(202);
      const third = await user.post("/api/v1/boxes", { template: "minimal", name: "quota-3" });
      expect(third.status).toBe(403);
      expect(third.body.error).toEqual({
        code: "forbidden",
        message: "box quota reached: at most 2 boxes per user; delete one first",
        details: { quota: 2 },
      });
      expect((await user.get("/api/v1/boxes")).body.boxes).toHaveLength(2);
      const other = await signedInClient(env().url, "quota-other");
      expect((await other.post("/api/v1/boxes", { template: "minimal", name: "quota-4" })).status).toBe(202);
    });

    it("counts one user's creates sent at once in turn: exactly the quota is placed", async () => {
      const agent = await registerServer(await env().admin(), "fc-burst");
      await agent.post("/agent/v1/heartbeat", heartbeat());
      const user = await signedInClient(env().url, "quota-burst");
      // Within the per-minute create limit (3), not within the quota (2).
      const send = () =>
        Promise.all(
          [1, 2, 3].map((i) => user.post("/api/v1/boxes", { template: "minimal", name: `burst-${i}` })),
        );
      let creates: ReturnType<typeof send>;
      if (env().kind === "postgres") {
        // Every server's placement held here until all three wait on a lock, so none is placed
        // before the others' transactions began: what keeps them from all passing the quota is
        // the owner's lock. (PGlite runs one transaction at a time anyway.)
        const { db } = env().cp.ctx;
        const all = await db.select({ id: servers.id }).from(servers);
        await db.transaction(async (tx) => {
          for (const { id } of all) await serializeIn(tx, `server:${id}`);
          creates = send();
          while ((await advisoryLockWaiters(db)) < 3) await sleep(20);
        });
      } else creates = send();
      expect((await creates!).map((r) => r.status).sort()).toEqual([202, 202, 403]);
      expect((await user.get("/api/v1/boxes")).body.boxes).toHaveLength(2);
    });

    it("lets exactly the limit through when attempts on one key arrive at once", async () => {
      const window = new RateWindow(env().cp.ctx.db, "burst", 5, 60_000);
      const now = Date.now();
      const waits = await Promise.all(Array.from({ length: 20 }, () => window.take("k", now)));
      expect(waits.filter((w) => w === 0)).toHaveLength(5);
      // Refused: the oldest attempt leaves the window a minute after it was made.
      expect(new Set(waits.filter((w) => w > 0))).toEqual(new Set([60_000]));
      expect(await window.take("other", now)).toBe(0);
      expect(await window.take("k", now + 30_000)).toBe(30_000);
      // Refused attempts are not counted: the key holds the five it let through.
      const [row] = await env().cp.ctx.db.select().from(rateWindows).where(eq(rateWindows.key, "burst:k"));
      expect(row!.hits.map((h) => h.getTime())).toEqual([now, now, now, now, now]);
      expect(await window.take("k", now + 60_001)).toBe(0);
    });

    it("limits box creations per user per minute with 429 and Retry-After", async () => {
      const user = await signedInClient(env().url, "rate");
      const create = () => user.post("/api/v1/boxes", { template: "no-such-template" });
      for (let i = 0; i < 3; i++) expect((await create()).status).toBe(400);
      const limited = await create();
      expect(limited.status).toBe(429);
      expect(limited.body.error.code).toBe("rate_limited");
      expect(limited.body.error.message).toMatch(/\(at most 3 a minute\); try again in \d+ s$/);
      const retryAfter = Number(limited.headers.get("retry-after"));
      expect(retryAfter).toBeGreaterThan(0);
      expect(retryAfter).toBeLessThanOrEqual(60);
      // Someone else is not held up, and a minute later this user is not either.
      expect(
        (await (await signedInClient(env().url, "rate-other")).post("/api/v1/boxes", { template: "x" }))
          .status,
      ).toBe(400);
      const clock = env().cp.ctx.clock;
      env().cp.ctx.clock = { now: () => new Date(Date.now() + 61_000) };
      try {
        expect((await create()).status).toBe(400);
      } finally {
        env().cp.ctx.clock = clock;
      }
    });

    it("bounds the streams one user holds open with 429, and frees a slot when one closes", async () => {
      const user = await signedInClient(env().url, "streams");
      const token = (await user.post("/api/v1/tokens", { name: "streams" })).body.token as string;
      const bearer = new TestClient(env().url, token);
      const aborts = [new AbortController(), new AbortController(), new AbortController()];
      for (const a of aborts) expect((await bearer.open("/api/v1/events", {}, a.signal)).status).toBe(200);
      const fourth = await user.get("/api/v1/events");
      expect(fourth.status).toBe(429);
      expect(fourth.body.error).toMatchObject({ code: "rate_limited", details: { limit: 3 } });
      const logs = await user.get("/api/v1/boxes/any-box/logs/stream");
      expect(logs.status).toBe(404); // a box that does not exist takes no slot
      // Another user has their own slots.
      const other = new AbortController();
      expect(
        (await (await signedInClient(env().url, "s2")).open("/api/v1/events", {}, other.signal)).status,
      ).toBe(200);
      other.abort();

      aborts[0]!.abort();
      const again = new AbortController();
      await expect.poll(async () => (await bearer.open("/api/v1/events", {}, again.signal)).status).toBe(200);
      for (const a of [...aborts, again]) a.abort();
    });

    it("closes the stream of a reader that stops reading instead of buffering for it", async () => {
      const user = await signedInClient(env().url, "slow");
      const token = (await user.post("/api/v1/tokens", { name: "slow" })).body.token as string;
      const teamId = (await user.get("/api/v1/me")).body.team.id as string;
      await expect.poll(() => metric(env().url, "doppio_sse_streams")).toBe(0);
      const dropped = await metric(env().url, "doppio_sse_dropped_total");

      // A raw connection that reads the response headers and then nothing more.
      const { port } = new URL(env().url);
      const socket = net.connect(Number(port), "127.0.0.1");
      // The server cuts the connection with data still unread: the reader sees a reset.
      socket.on("error", () => {});
      const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
      socket.write(`GET /api/v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\n\r\n`);
      const head = await new Promise<string>((resolve) => socket.once("data", (b) => resolve(b.toString())));
      expect(head).toMatch(/^HTTP\/1\.1 200/);
      socket.pause();

      const reason = "x".repeat(64 * 1024);
      const big = { slug: "slow-box", statusReason: reason } as unknown as Box;
      let published = 0;
      while ((await metric(env().url, "doppio_sse_dropped_total")) === dropped) {
        // The kernel's socket buffers take a few MB first; Node's own buffer must stop at 256 KB.
        expect(published, "the stream was never closed").toBeLessThan(64 * 1024 * 1024);
        for (let i = 0; i < 16; i++) env().cp.ctx.bus.publish(teamId, { type: "box", box: big });
        published += 16 * reason.length;
        await tick();
      }
      expect(await metric(env().url, "doppio_sse_streams")).toBe(0);
      // The connection is gone, and the slot with it: the next stream opens.
      await closed;
      const next = new AbortController();
      expect((await new TestClient(env().url, token).open("/api/v1/events", {}, next.signal)).status).toBe(
        200,
      );
      next.abort();
    });
  },
  LIMITS,
);
