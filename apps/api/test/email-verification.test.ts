import { randomBytes } from "node:crypto";
import { Writable } from "node:stream";
import { eq } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ledgerEntries, trialGrants } from "../src/db/schema.ts";
import { TestClock, useClock, wallet } from "./support/billing.ts";
import { PASSWORD, TestClient, uniqueEmail } from "./support/client.ts";
import { startControlPlane, type TestControlPlane } from "./support/control-plane.ts";
import { describeOnEachDb } from "./support/each-db.ts";
import { githubConfig, oauthFlow, sessionCookieOf } from "./support/github.ts";
import { GitHubStandIn } from "./support/github-standin.ts";
import { type SmtpSink, startSmtpSink } from "./support/smtp-sink.ts";

const TRIAL = 2000;
const MAIL_FROM = "doppiobox <accounts@doppiobox.test>";
const sink: SmtpSink = await startSmtpSink();
afterAll(() => sink.close());

/** The token of the newest verification link mailed to `email` (the link's `#token=` fragment). */
async function linkFor(email: string, after = 0): Promise<{ url: URL; token: string }> {
  for (let i = 0; i < 200; i++) {
    const mails = sink.mail.filter((m) => m.to.includes(email));
    if (mails.length > after) {
      const mail = mails[mails.length - 1]!;
      expect(mail.headers.subject).toBe("Verify your doppiobox email address");
      const raw = /https?:\/\/\S+#token=\S+/.exec(mail.text)?.[0];
      expect(raw).toBeDefined();
      const url = new URL(raw!);
      return { url, token: url.hash.slice("#token=".length) };
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`no verification mail for ${email}`);
}

const mailCount = (email: string) => sink.mail.filter((m) => m.to.includes(email)).length;

async function signup(env: TestControlPlane, email = uniqueEmail("verify")) {
  const client = new TestClient(env.url);
  const res = await client.post("/api/v1/auth/signup", { email, password: PASSWORD });
  expect(res.status).toBe(201);
  return { client, email: res.body.email as string, id: res.body.id as string, me: res.body };
}

const verify = (env: TestControlPlane, token: string) =>
  new TestClient(env.url).post("/api/v1/auth/verify-email", { token });

const trialRows = async (env: TestControlPlane, userId: string) =>
  (await env.cp.ctx.db.select().from(ledgerEntries).where(eq(ledgerEntries.userId, userId))).filter(
    (e) => e.kind === "trial",
  );

describeOnEachDb(
  "email verification and the trial credit",
  (env) => {
    it("a password signup is unverified with no trial (creating a box is a 402); its mailed link verifies once and grants the trial; a replay is refused", async () => {
      const u = await signup(env());
      expect(u.me.emailVerified).toBe(false);
      expect((await wallet(u.client)).balance).toBe(0);
      const create = await u.client.post("/api/v1/boxes", { template: "minimal", name: "unverified" });
      expect(create.status).toBe(402);
      expect(create.body.error.code).toBe("payment_required");

      const { url, token } = await linkFor(u.email);
      expect(`${url.origin}${url.pathname}`).toBe(`${env().url}/dashboard/verify-email`);
      expect(url.search).toBe(""); // the token is in the fragment: never sent to a server in a URL
      expect(token).toMatch(/^dpv_[A-Za-z0-9_-]{43}$/);
      const mail = sink.mail.find((m) => m.to.includes(u.email))!;
      expect(mail.from).toBe("accounts@doppiobox.test");

      const ok = await verify(env(), token);
      expect(ok.status).toBe(200);
      expect(ok.body).toEqual({ email: u.email, trialCredit: TRIAL, currency: "EUR" });
      expect((await u.client.get("/api/v1/me")).body.emailVerified).toBe(true);
      expect((await wallet(u.client)).balance).toBe(TRIAL);

      const replay = await verify(env(), token);
      expect(replay.status).toBe(400);
      expect(replay.body.error.message).toMatch(/already used, replaced by a newer one, or has expired/);
      expect(await trialRows(env(), u.id)).toHaveLength(1);
      expect((await wallet(u.client)).balance).toBe(TRIAL);
    });

    it("refuses a wrong token, an expired one, and one a newer link replaced", async () => {
      const u = await signup(env());
      const first = await linkFor(u.email);
      expect((await verify(env(), `dpv_${randomBytes(32).toString("base64url")}`)).status).toBe(400);
      expect((await verify(env(), `${first.token}x`)).status).toBe(400);

      // A resend replaces the first link: only the newest works.
      expect((await u.client.post("/api/v1/me/verification")).status).toBe(204);
      const second = await linkFor(u.email, 1);
      expect(second.token).not.toBe(first.token);
      expect((await verify(env(), first.token)).status).toBe(400);

      // 24 hours later the newest has expired too.
      const clock = new TestClock(new Date(Date.now() + 24 * 3_600_000 + 1_000));
      const restore = useClock(env(), clock);
      try {
        expect((await verify(env(), second.token)).status).toBe(400);
      } finally {
        restore();
      }
      expect((await u.client.get("/api/v1/me")).body.emailVerified).toBe(false);
      expect((await wallet(u.client)).balance).toBe(0);
      expect(await trialRows(env(), u.id)).toHaveLength(0);
    });

    it("grants one trial when the same link is verified many times at once", async () => {
      const u = await signup(env());
      const { token } = await linkFor(u.email);
      const answers = await Promise.all(Array.from({ length: 6 }, () => verify(env(), token)));
      expect(answers.map((a) => a.status).sort()).toEqual([200, 400, 400, 400, 400, 400]);
      expect(await trialRows(env(), u.id)).toHaveLength(1);
      expect((await wallet(u.client)).balance).toBe(TRIAL);
    });

    it("grants one trial per address: two accounts of the same address (case, +tag) verifying at once get one between them, and a later one none", async () => {
      const base = uniqueEmail("same");
      const [local, domain] = base.split("@") as [string, string];
      const a = await signup(env(), base);
      const b = await signup(env(), `${local.toUpperCase()}+again@${domain.toUpperCase()}`);
      expect(b.email).toBe(`${local}+again@${domain}`); // emails are stored lower-cased
      const [ta, tb] = [await linkFor(a.email), await linkFor(b.email)];
      const [ra, rb] = await Promise.all([verify(env(), ta.token), verify(env(), tb.token)]);
      expect([ra.status, rb.status]).toEqual([200, 200]);
      expect([ra.body.trialCredit, rb.body.trialCredit].sort()).toEqual([0, TRIAL]);
      const rows = [...(await trialRows(env(), a.id)), ...(await trialRows(env(), b.id))];
      expect(rows).toHaveLength(1);

      // A third account for the address (a re-signup) is verified, and gets nothing.
      const c = await signup(env(), `${local}+third@${domain}`);
      const rc = await verify(env(), (await linkFor(c.email)).token);
      expect(rc.status).toBe(200);
      expect(rc.body.trialCredit).toBe(0);
      expect((await wallet(c.client)).balance).toBe(0);
      expect((await c.client.post("/api/v1/boxes", { template: "minimal", name: "third" })).status).toBe(402);
      const grants = await env().cp.ctx.db.select().from(trialGrants).where(eq(trialGrants.emailKey, base));
      expect(grants).toHaveLength(1);
    });

    it("resends at most 3 links an hour per account, refuses a resend once verified, and lets only admins mark an account verified", async () => {
      const u = await signup(env());
      await linkFor(u.email);
      for (let i = 0; i < 3; i++) expect((await u.client.post("/api/v1/me/verification")).status).toBe(204);
      const refused = await u.client.post("/api/v1/me/verification");
      expect(refused.status).toBe(429);
      expect(Number(refused.headers.get("retry-after"))).toBeGreaterThan(0);
      await linkFor(u.email, 3);
      expect(mailCount(u.email)).toBe(4);
      // Another account's limit is its own.
      const other = await signup(env());
      expect((await other.client.post("/api/v1/me/verification")).status).toBe(204);

      expect((await u.client.post("/api/v1/admin/verify-email", { email: u.email })).status).toBe(403);
      const admin = await env().admin();
      const marked = await admin.post("/api/v1/admin/verify-email", { email: u.email.toUpperCase() });
      expect(marked.status).toBe(200);
      expect(marked.body.emailVerified).toBe(true);
      expect((await wallet(u.client)).balance).toBe(TRIAL);
      // Marked again: nothing more.
      expect((await admin.post("/api/v1/admin/verify-email", { email: u.email })).status).toBe(200);
      expect(await trialRows(env(), u.id)).toHaveLength(1);
      expect((await admin.post("/api/v1/admin/verify-email", { email: "nobody@example.com" })).status).toBe(
        404,
      );
      expect((await u.client.post("/api/v1/me/verification")).status).toBe(409);
      // The link mailed earlier still works as a proof, and grants nothing more.
      const late = await verify(env(), (await linkFor(u.email, 3)).token);
      expect(late.status).toBe(200);
      expect(late.body.trialCredit).toBe(0);
      expect(await trialRows(env(), u.id)).toHaveLength(1);
    });
  },
  { smtpUrl: sink.url, mailFrom: MAIL_FROM, emailVerification: "required" },
);

describe("email verification without a mail transport", () => {
  let required: TestControlPlane;
  let defaults: TestControlPlane;
  const lines: string[] = [];

  beforeAll(async () => {
    const logTo = new Writable({
      write(chunk, _enc, done) {
        lines.push(String(chunk));
        done();
      },
    });
    required = await startControlPlane({
      config: { emailVerification: "required", logLevel: "info" },
      logTo,
    });
    defaults = await startControlPlane();
  });
  afterAll(async () => {
    await required?.close();
    await defaults?.close();
  });

  it("when required, writes the link to the log at info, and it verifies", async () => {
    const u = await signup(required);
    expect(u.me.emailVerified).toBe(false);
    const line = lines.map((l) => JSON.parse(l)).find((l) => l.email === u.email && l.link);
    expect(line).toBeDefined();
    expect(line.level).toBe(30);
    const token = new URL(line.link).hash.slice("#token=".length);
    const ok = await verify(required, token);
    expect(ok.status).toBe(200);
    expect(ok.body.trialCredit).toBe(TRIAL);
  });

  it("by default (no mail transport: a local `make up`) an account is verified at signup with its trial", async () => {
    const u = await signup(defaults);
    expect(u.me.emailVerified).toBe(true);
    expect((await wallet(u.client)).balance).toBe(TRIAL);
  });
});

describe("Sign in with GitHub and verification", () => {
  const gh = new GitHubStandIn();
  let env: TestControlPlane;

  beforeAll(async () => {
    await gh.start();
    env = await startControlPlane({
      config: { ...githubConfig(gh), smtpUrl: sink.url, mailFrom: MAIL_FROM, emailVerification: "required" },
    });
  });
  afterAll(async () => {
    await env?.close();
    await gh.stop();
  });

  it("an account made from GitHub's verified primary email is verified at creation with its trial, and no link is mailed", async () => {
    const user = gh.addUser("verified-gh", [
      { email: "Verified-GH@Example.com", primary: true, verified: true },
    ]);
    const flow = await oauthFlow(env.url, gh, user);
    const session = sessionCookieOf(flow.done)!;
    const me = await fetch(`${env.url}/api/v1/me`, { headers: { cookie: session } });
    const body = (await me.json()) as { email: string; emailVerified: boolean };
    expect(body).toMatchObject({ email: "verified-gh@example.com", emailVerified: true });
    const w = await fetch(`${env.url}/api/v1/billing/wallet`, { headers: { cookie: session } });
    expect(((await w.json()) as { balance: number }).balance).toBe(TRIAL);
    expect(mailCount("verified-gh@example.com")).toBe(0);
  });
});
