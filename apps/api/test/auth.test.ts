import { eq } from "drizzle-orm";
import { expect, it } from "vitest";
import { sessions } from "../src/db/schema.ts";
import { PASSWORD, signedInClient, TestClient, uniqueEmail } from "./support/client.ts";
import { ADMIN_EMAIL } from "./support/control-plane.ts";
import { describeOnEachDb } from "./support/each-db.ts";

describeOnEachDb("auth", (env) => {
  it("signs up ordinary accounts with an HttpOnly session cookie; the configured admin is the only admin", async () => {
    // A fresh install: nobody has signed up yet, and the stranger who does first is no admin.
    const stranger = new TestClient(env().url);
    const email = uniqueEmail("first");
    const res = await stranger.post("/api/v1/auth/signup", { email, password: PASSWORD, name: "Ada" });
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ email, name: "Ada", role: "user", team: { name: "Ada's team" } });
    const cookie = res.headers.getSetCookie().find((c) => c.startsWith("doppio_session="))!;
    expect(cookie).toMatch(/HttpOnly/i);
    expect(cookie).toMatch(/SameSite=Lax/i);
    const me = await stranger.get("/api/v1/me");
    expect(me.status).toBe(200);
    expect(me.body.email).toBe(email);
    expect((await stranger.get("/api/v1/servers")).status).toBe(403);

    const admin = await env().admin();
    expect((await admin.get("/api/v1/me")).body).toMatchObject({ email: ADMIN_EMAIL, role: "admin" });
    expect((await admin.get("/api/v1/servers")).status).toBe(200);
    const taken = await new TestClient(env().url).post("/api/v1/auth/signup", {
      email: ADMIN_EMAIL,
      password: PASSWORD,
    });
    expect(taken.status).toBe(409);
  });

  it("refuses a duplicate email and a weak password with a clear message", async () => {
    const email = uniqueEmail("dup");
    await new TestClient(env().url).post("/api/v1/auth/signup", { email, password: PASSWORD });
    const dup = await new TestClient(env().url).post("/api/v1/auth/signup", {
      email: email.toUpperCase(),
      password: PASSWORD,
    });
    expect(dup.status).toBe(409);
    expect(dup.body.error).toMatchObject({
      code: "conflict",
      message: "an account with this email already exists",
    });
    const weak = await new TestClient(env().url).post("/api/v1/auth/signup", {
      email: uniqueEmail(),
      password: "short",
    });
    expect(weak.status).toBe(400);
    expect(weak.body.error.code).toBe("validation_failed");
    expect(JSON.stringify(weak.body.error.details)).toContain("at least 10 characters");
  });

  it("logs in and out; a wrong password and an unknown email look the same", async () => {
    const email = uniqueEmail("login");
    await new TestClient(env().url).post("/api/v1/auth/signup", { email, password: PASSWORD });
    const client = new TestClient(env().url);
    const wrong = await client.post("/api/v1/auth/login", { email, password: "not the password" });
    const unknown = await client.post("/api/v1/auth/login", {
      email: uniqueEmail("nobody"),
      password: PASSWORD,
    });
    expect(wrong.status).toBe(401);
    expect(unknown.status).toBe(401);
    expect(wrong.body).toEqual(unknown.body);
    expect((await client.post("/api/v1/auth/login", { email, password: PASSWORD })).status).toBe(200);
    expect((await client.get("/api/v1/me")).status).toBe(200);
    expect((await client.post("/api/v1/auth/logout")).status).toBe(204);
    expect((await client.get("/api/v1/me")).status).toBe(401);
  });

  it("refuses a session past its expiry", async () => {
    const client = await signedInClient(env().url, "expiring");
    const me = await client.get("/api/v1/me");
    expect(me.status).toBe(200);
    await env()
      .cp.ctx.db.update(sessions)
      .set({ expiresAt: new Date(Date.now() - 60_000) })
      .where(eq(sessions.userId, me.body.id));
    expect((await client.get("/api/v1/me")).status).toBe(401);
  });

  it("creates personal API tokens shown once, authenticates with them, and revokes them", async () => {
    const client = new TestClient(env().url);
    await client.post("/api/v1/auth/signup", { email: uniqueEmail("tok"), password: PASSWORD });
    const created = await client.post("/api/v1/tokens", { name: "laptop" });
    expect(created.status).toBe(201);
    expect(created.body.token).toMatch(/^dpb_[A-Za-z0-9_-]{43}$/);
    const list = await client.get("/api/v1/tokens");
    expect(list.body.tokens).toHaveLength(1);
    expect(JSON.stringify(list.body)).not.toContain(created.body.token);

    const cli = new TestClient(env().url, created.body.token);
    expect((await cli.get("/api/v1/me")).status).toBe(200);
    expect((await client.del(`/api/v1/tokens/${created.body.id}`)).status).toBe(204);
    expect((await cli.get("/api/v1/me")).status).toBe(401);
    expect((await client.del(`/api/v1/tokens/${created.body.id}`)).status).toBe(404);
  });

  it("keeps admin routes for admins", async () => {
    const user = new TestClient(env().url);
    await user.post("/api/v1/auth/signup", { email: uniqueEmail("plain"), password: PASSWORD });
    const res = await user.get("/api/v1/servers");
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe("forbidden");
    expect((await new TestClient(env().url).get("/api/v1/servers")).status).toBe(401);
  });
});

describeOnEachDb(
  "auth rate limit",
  (env) => {
    it("limits signup and login attempts per client", async () => {
      const client = new TestClient(env().url);
      const statuses: number[] = [];
      for (let i = 0; i < 5; i++) {
        statuses.push(
          (await client.post("/api/v1/auth/login", { email: uniqueEmail(), password: "whatever123" })).status,
        );
      }
      expect(statuses.slice(0, 3)).toEqual([401, 401, 401]);
      expect(statuses.slice(3)).toEqual([429, 429]);
      const limited = await client.post("/api/v1/auth/login", { email: uniqueEmail(), password: "x" });
      expect(limited.body.error.code).toBe("rate_limited");
    });
  },
  { authRateLimitPerMinute: 3 },
);
