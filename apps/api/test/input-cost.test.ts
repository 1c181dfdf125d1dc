import { expect, it } from "vitest";
import { signedInClient, TestClient } from "./support/client.ts";
import { describeOnEachDb } from "./support/each-db.ts";

/**
 * No request field may cost super-linear work: every string field gets values as long as
 * the 64 KB body limit allows, shaped to make backtracking patterns explode, and each must
 * be refused (4xx) about as fast as a plain string of the same length. The old email pattern
 * took ~7 s on the second shape. Times are compared with the plain string's, measured in the
 * same moment, so a loaded machine slows both sides alike; the plain string itself must stay
 * under a bound no linear check comes near.
 */
const LEN = 64 * 1024 - 512;
const SHAPES: Record<string, string> = {
  plain: "a".repeat(LEN),
  dotsBetweenAts: `a@${".".repeat(LEN)}@`,
  dotsThenSpace: `a@${".".repeat(LEN)} x`,
  hyphens: `a${"-".repeat(LEN)}!`,
  labels: `${"a.".repeat(LEN / 2)}-`,
  spaces: ` ${"a ".repeat(LEN / 2)}`,
};
const PLAIN_LIMIT_MS = 2000;
/**
 * A shaped value may cost this many times the plain one plus scheduling noise, no more; the
 * best of two tries counts (a backtracking pattern is slow every time, a busy host is not).
 */
const RATIO = 20;
const NOISE_MS = 1000;

type Send = (value: string) => Promise<{ status: number }>;

async function timed(field: string, shape: string, send: Send, value: string): Promise<number> {
  const started = performance.now();
  const res = await send(value);
  const ms = performance.now() - started;
  expect(res.status, `${field} (${shape})`).toBeGreaterThanOrEqual(400);
  expect(res.status, `${field} (${shape})`).toBeLessThan(500);
  return ms;
}

async function expectCheap(field: string, send: Send): Promise<void> {
  const plain: number[] = [];
  for (let i = 0; i < 3; i++) plain.push(await timed(field, "plain", send, SHAPES.plain!));
  const base = Math.min(...plain);
  expect(base, `${field} (plain) took ${Math.round(base)} ms`).toBeLessThan(PLAIN_LIMIT_MS);
  const limit = RATIO * base + NOISE_MS;
  for (const [shape, value] of Object.entries(SHAPES)) {
    let ms = await timed(field, shape, send, value);
    if (ms >= limit) ms = Math.min(ms, await timed(field, shape, send, value));
    expect(ms, `${field} (${shape}) took ${Math.round(ms)} ms, plain ${Math.round(base)} ms`).toBeLessThan(
      limit,
    );
  }
}

describeOnEachDb(
  "input cost",
  (env) => {
    it("refuses huge signup and login fields in milliseconds", async () => {
      const anon = new TestClient(env().url);
      const pw = "long enough password";
      await anon.post("/api/v1/auth/login", { email: "warm@example.com", password: "x" }); // warm up
      await expectCheap("signup.email", (v) => anon.post("/api/v1/auth/signup", { email: v, password: pw }));
      await expectCheap("signup.password", (v) =>
        anon.post("/api/v1/auth/signup", { email: "x@example.com", password: v }),
      );
      await expectCheap("signup.name", (v) =>
        anon.post("/api/v1/auth/signup", { email: "not-an-email", password: pw, name: v }),
      );
      await expectCheap("login.email", (v) => anon.post("/api/v1/auth/login", { email: v, password: pw }));
      await expectCheap("login.password", (v) =>
        anon.post("/api/v1/auth/login", { email: "x@example.com", password: v }),
      );
    });

    it("refuses huge box, env and token fields in milliseconds", async () => {
      const user = await signedInClient(env().url, "cost");
      const create = (body: Record<string, unknown>) =>
        user.post("/api/v1/boxes", { template: "minimal", ...body });
      await expectCheap("boxes.name", (v) => create({ name: v }));
      await expectCheap("boxes.template", (v) => user.post("/api/v1/boxes", { template: v }));
      await expectCheap("boxes.size", (v) => create({ size: v }));
      await expectCheap("boxes.env name", (v) => create({ env: { [v]: "x" } }));
      await expectCheap("boxes.env value", (v) => create({ env: { A: v } }));
      await expectCheap("env name", (v) =>
        user.request("PATCH", "/api/v1/boxes/some-box", { env: { [v]: "x" } }),
      );
      await expectCheap("env value", (v) =>
        user.request("PATCH", "/api/v1/boxes/some-box", { env: { A: v } }),
      );
      await expectCheap("box path", (v) => user.get(`/api/v1/boxes/${v}`));
      await expectCheap("tokens.name", (v) => user.post("/api/v1/tokens", { name: v }));
      await expectCheap("tokens.expiresAt", (v) => user.post("/api/v1/tokens", { name: "t", expiresAt: v }));
    });

    it("refuses huge server registration fields in milliseconds", async () => {
      const admin = await env().admin();
      const server = (body: Record<string, unknown>) =>
        admin.post("/api/v1/servers", {
          name: "cost-host",
          domain: "cost.example.test",
          backend: "qemu",
          capacity: { vcpu: 1, memoryMb: 1024, diskGb: 1 },
          ...body,
        });
      await expectCheap("servers.name", (v) => server({ name: v }));
      await expectCheap("servers.domain", (v) => server({ domain: v }));
    });
  },
  { authRateLimitPerMinute: 10_000 },
);
