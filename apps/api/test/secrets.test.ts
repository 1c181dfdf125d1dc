import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { eq } from "drizzle-orm";
import { describe, expect, it } from "vitest";
import { hashPassword, scryptParams } from "../src/auth/password.ts";
import { loadConfig } from "../src/config.ts";
import { users } from "../src/db/schema.ts";
import { PASSWORD, TestClient, uniqueEmail } from "./support/client.ts";
import {
  ADMIN_EMAIL,
  ADMIN_PASSWORD,
  startControlPlane,
  type TestControlPlane,
} from "./support/control-plane.ts";
import { describeOnEachDb } from "./support/each-db.ts";

const HOUR = 3_600_000;

describe("passwordScryptN (scrypt's cost for new password hashes)", () => {
  it("is OWASP's 2^17 unless set, and a power of two from 2^14 to 2^17 when set", () => {
    expect(loadConfig({}).passwordScryptN).toBe(1 << 17);
    expect(loadConfig({ DOPPIO_PASSWORD_SCRYPT_N: "16384" }).passwordScryptN).toBe(1 << 14);
    for (const bad of ["8192", "262144", "20000", "cheap"]) {
      expect(() => loadConfig({ DOPPIO_PASSWORD_SCRYPT_N: bad }), bad).toThrow(/passwordScryptN/);
    }
  });
});

const storedHash = async (cp: TestControlPlane, email: string) =>
  (await cp.cp.ctx.db.select().from(users).where(eq(users.email, email)))[0]!.passwordHash;

/** A new account through the API: its email and a client to log it in with. */
async function signUp(cp: TestControlPlane, tag: string): Promise<{ email: string; client: TestClient }> {
  const email = uniqueEmail(tag);
  const client = new TestClient(cp.url);
  expect((await client.post("/api/v1/auth/signup", { email, password: PASSWORD })).status).toBe(201);
  return { email, client };
}

/** Replaces the account's stored hash with one of PASSWORD made at cost `N`; returns it. */
async function storeHashAt(cp: TestControlPlane, email: string, N: number): Promise<string> {
  const hash = await hashPassword(PASSWORD, scryptParams(N));
  await cp.cp.ctx.db.update(users).set({ passwordHash: hash }).where(eq(users.email, email));
  return hash;
}

describeOnEachDb(
  "password hashes at the production cost",
  (env) => {
    it("hashes with scrypt N=2^17, r=8, p=1 and moves an older hash up at the next login", async () => {
      const { email, client } = await signUp(env(), "hash");
      expect(await storedHash(env(), email)).toMatch(/^scrypt\$131072\$8\$1\$/);

      // An account from before the cost was raised.
      const old = await storeHashAt(env(), email, 1 << 14);
      expect((await client.post("/api/v1/auth/login", { email, password: "not the password" })).status).toBe(
        401,
      );
      expect(await storedHash(env(), email)).toBe(old);
      expect((await client.post("/api/v1/auth/login", { email, password: PASSWORD })).status).toBe(200);
      expect(await storedHash(env(), email)).toMatch(/^scrypt\$131072\$8\$1\$/);
      expect((await client.post("/api/v1/auth/login", { email, password: PASSWORD })).status).toBe(200);
    });
  },
  { passwordScryptN: 1 << 17 },
);

describeOnEachDb("password hashes and API token expiry", (env) => {
  it("hashes at the configured cost and moves a hash of another cost to it at the next login", async () => {
    expect(env().cp.ctx.config.passwordScryptN).toBe(1 << 14); // vitest.config.ts
    const { email, client } = await signUp(env(), "cost");
    expect(await storedHash(env(), email)).toMatch(/^scrypt\$16384\$8\$1\$/);
    await storeHashAt(env(), email, 1 << 15);
    expect((await client.post("/api/v1/auth/login", { email, password: PASSWORD })).status).toBe(200);
    expect(await storedHash(env(), email)).toMatch(/^scrypt\$16384\$8\$1\$/);
  });

  it("lets an API token expire: refused after expiresAt, listed with it, and never born expired", async () => {
    const user = new TestClient(env().url);
    await user.post("/api/v1/auth/signup", { email: uniqueEmail("expiry"), password: PASSWORD });
    const past = await user.post("/api/v1/tokens", { name: "old", expiresAt: "2001-01-01T00:00:00Z" });
    expect(past.status).toBe(400);
    expect(past.body.error).toMatchObject({ code: "validation_failed", details: { field: "expiresAt" } });
    expect((await user.post("/api/v1/tokens", { name: "bad", expiresAt: "tomorrow" })).status).toBe(400);

    const expiresAt = new Date(Date.now() + HOUR).toISOString();
    const created = await user.post("/api/v1/tokens", { name: "ci", expiresAt });
    expect(created.status).toBe(201);
    expect(created.body.expiresAt).toBe(expiresAt);
    const forever = await user.post("/api/v1/tokens", { name: "laptop" });
    expect(forever.body.expiresAt).toBeNull();
    const ci = new TestClient(env().url, created.body.token);
    expect((await ci.get("/api/v1/me")).status).toBe(200);

    const clock = env().cp.ctx.clock;
    env().cp.ctx.clock = { now: () => new Date(Date.now() + 2 * HOUR) };
    try {
      expect((await ci.get("/api/v1/me")).status).toBe(401);
      expect((await new TestClient(env().url, forever.body.token).get("/api/v1/me")).status).toBe(200);
      const listed = (await user.get("/api/v1/tokens")).body.tokens;
      expect(listed.map((t: any) => [t.name, t.expiresAt])).toEqual([
        ["ci", expiresAt],
        ["laptop", null],
      ]);
    } finally {
      env().cp.ctx.clock = clock;
    }
  });
});

describeOnEachDb(
  "metrics token",
  (env) => {
    it("serves /metrics only with the configured bearer token", async () => {
      const anon = new TestClient(env().url);
      const none = await anon.get("/metrics");
      expect(none.status).toBe(401);
      expect(none.body.error.code).toBe("unauthorized");
      expect((await anon.withBearer("wrong-token-of-some-length").get("/metrics")).status).toBe(401);
      const ok = await anon.withBearer("metrics-token-for-the-scraper").get("/metrics");
      expect(ok.status).toBe(200);
      expect(ok.body).toContain("doppio_http_request_duration_seconds");
    });
  },
  { metricsToken: "metrics-token-for-the-scraper" },
);

describe("admin bootstrap", () => {
  it("never promotes an account someone else registered with the configured admin email", async () => {
    const dataDir = await mkdtemp(path.join(tmpdir(), "doppio-bootstrap-"));
    try {
      // An install started without an admin: whoever signs up, even with that email, is a user.
      const open = await startControlPlane({
        dataDir,
        config: { adminEmail: undefined, adminPasswordFile: undefined },
      });
      const squatter = await new TestClient(open.url).post("/api/v1/auth/signup", {
        email: ADMIN_EMAIL,
        password: PASSWORD,
      });
      expect(squatter.body.role).toBe("user");
      await open.close();

      // The operator now configures that address as the admin: the start refuses.
      await expect(startControlPlane({ dataDir })).rejects.toThrow(/already has an ordinary account/);
      const other = await startControlPlane({ dataDir, config: { adminEmail: "operator@doppio.test" } });
      try {
        const admin = new TestClient(other.url);
        const login = await admin.post("/api/v1/auth/login", {
          email: "operator@doppio.test",
          password: ADMIN_PASSWORD,
        });
        expect(login.body.role).toBe("admin");
        const again = new TestClient(other.url);
        await again.post("/api/v1/auth/login", { email: ADMIN_EMAIL, password: PASSWORD });
        expect((await again.get("/api/v1/me")).body.role).toBe("user");
      } finally {
        await other.close();
      }
    } finally {
      await rm(dataDir, { recursive: true, force: true });
    }
    // Three control-plane starts on PGlite and four scrypt hashes: over 30 s on a loaded 2-core host.
  }, 120_000);
});
