import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import type { FastifyInstance } from "fastify";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { GitCredentialAnswer } from "../../src/control-plane.ts";
import {
  ASK_BURST,
  ASK_EVERY_MS,
  GitCredentialCache,
  REUSE_MARGIN_MS,
} from "../../src/metadata/credentials.ts";
import { buildMetadataService } from "../../src/metadata/service.ts";
import { newMetadataToken } from "../../src/metadata/tokens.ts";
import { BoxStore } from "../../src/store/boxes.ts";
import { type Db, openStore } from "../../src/store/db.ts";

const at = (ms: number) => new Date(ms).toISOString();

/** Counts control-plane calls and answers a credential expiring `ttlMs` after the clock. */
function issuing(clock: { t: number }, ttlMs: number) {
  const calls: string[] = [];
  return {
    calls,
    async gitCredential(slug: string): Promise<GitCredentialAnswer> {
      calls.push(slug);
      return {
        credential: { username: "x-access-token", token: `t${calls.length}`, expiresAt: at(clock.t + ttlMs) },
      };
    },
  };
}

describe("GitCredentialCache", () => {
  it("reuses a credential until 60 s before it expires, then asks again", async () => {
    const clock = { t: Date.parse("2030-01-01T00:00:00Z") };
    const cp = issuing(clock, 3_600_000);
    const cache = new GitCredentialCache(cp, { now: () => new Date(clock.t) });
    const first = await cache.get("k", "box");
    clock.t += 3_600_000 - REUSE_MARGIN_MS - 1;
    expect(await cache.get("k", "box")).toEqual(first);
    expect(cp.calls).toHaveLength(1);
    clock.t += 1;
    const second = await cache.get("k", "box");
    expect(second).not.toEqual(first);
    expect(cp.calls).toHaveLength(2);
  });

  it("never reuses a credential that is already inside the margin, and keys by token, not slug", async () => {
    const clock = { t: 0 };
    const short = issuing(clock, 30_000);
    const cache = new GitCredentialCache(short, { now: () => new Date(clock.t) });
    await cache.get("k", "box");
    await cache.get("k", "box");
    expect(short.calls).toHaveLength(2);
    expect(cache.size).toBe(0);

    const long = issuing(clock, 3_600_000);
    const byToken = new GitCredentialCache(long, { now: () => new Date(clock.t) });
    await byToken.get("boot-1", "box");
    // Same slug, another boot (or a new box reusing the slug): a new request.
    await byToken.get("boot-2", "box");
    expect(long.calls).toEqual(["box", "box"]);
  });

  it("forget (the box's git credential erase) drops only that boot's credential", async () => {
    const clock = { t: 0 };
    const cp = issuing(clock, 3_600_000);
    const cache = new GitCredentialCache(cp, { now: () => new Date(clock.t) });
    await cache.get("boot-1", "box");
    const other = await cache.get("boot-2", "other");
    expect(cache.forget("boot-1")).toBe(true);
    expect(cache.forget("boot-1")).toBe(false);
    await cache.get("boot-1", "box");
    expect(await cache.get("boot-2", "other")).toEqual(other);
    expect(cp.calls).toEqual(["box", "other", "box"]);
  });

  it("does not cache an answer without a credential", async () => {
    const calls: string[] = [];
    const cache = new GitCredentialCache(
      {
        gitCredential: async (slug) => {
          calls.push(slug);
          return { unavailable: "GitHub is not connected for this box's owner" };
        },
      },
      { now: () => new Date() },
    );
    expect(await cache.get("k", "box")).toEqual({
      unavailable: "GitHub is not connected for this box's owner",
    });
    await cache.get("k", "box");
    expect(calls).toHaveLength(2);
  });

  it("asks for one boot one at a time: requests meanwhile share the answer", async () => {
    let answer!: (a: GitCredentialAnswer) => void;
    const calls: string[] = [];
    const cache = new GitCredentialCache(
      {
        gitCredential: (slug) => {
          calls.push(slug);
          return new Promise((resolve) => {
            answer = resolve;
          });
        },
      },
      { now: () => new Date(0) },
    );
    const waiting = Promise.all([1, 2, 3, 4, 5].map(() => cache.get("k", "box")));
    await new Promise((r) => setImmediate(r));
    expect(calls).toEqual(["box"]);
    answer({ unavailable: "GitHub is not connected for this box's owner" });
    expect(new Set((await waiting).map((a) => JSON.stringify(a))).size).toBe(1);
    const again = cache.get("k", "box"); // not cached: asked again, now that the first ask is over
    expect(calls).toHaveLength(2);
    answer({ unavailable: "still not connected" });
    expect(await again).toEqual({ unavailable: "still not connected" });
  });

  it("holds a boot asking in a loop to its budget, erase or not; other boots are served", async () => {
    const clock = { t: 0 };
    const cp = issuing(clock, 3_600_000);
    const cache = new GitCredentialCache(cp, { now: () => new Date(clock.t) });
    const loop = async () => {
      const answer = await cache.get("looping", "box");
      cache.forget("looping"); // its `git credential erase`, to be asked again
      return answer;
    };
    for (let i = 0; i < ASK_BURST; i++) expect(await loop()).toHaveProperty("credential");
    expect(await loop()).toEqual({ retryAfterMs: ASK_EVERY_MS, first: true });
    clock.t += 4_000;
    expect(await loop()).toEqual({ retryAfterMs: ASK_EVERY_MS - 4_000, first: false });
    expect(cp.calls).toHaveLength(ASK_BURST);
    expect(await cache.get("other-boot", "other")).toHaveProperty("credential");

    clock.t += 6_000; // one ask earned back, and only one
    expect(await loop()).toHaveProperty("credential");
    expect(await loop()).toEqual({ retryAfterMs: ASK_EVERY_MS, first: true });
    // A boot that stops asking gets its whole budget back, and its entry goes.
    clock.t += ASK_BURST * ASK_EVERY_MS;
    for (let i = 0; i < ASK_BURST; i++) expect(await loop()).toHaveProperty("credential");
    expect(cp.calls.filter((s) => s === "box")).toHaveLength(2 * ASK_BURST + 1);
  });
});

/**
 * Tap mode checks the caller's address against the token's box. On loopback the caller is
 * 127.0.0.1: a box recorded at 127.0.0.1 passes, a box at a pool address does not.
 */
describe("metadata service source-address check (tap mode)", () => {
  let dir: string;
  let db: Db;
  let boxes: BoxStore;
  let app: FastifyInstance;
  let url: string;
  const tokens: Record<string, string> = {};

  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), "doppio-metadata-src-"));
    db = openStore(dir);
    boxes = new BoxStore(db);
    for (const [slug, ip] of [
      ["here", "127.0.0.1"],
      ["elsewhere", "10.0.0.7"],
    ] as const) {
      boxes.upsert({
        slug,
        desiredState: "running",
        ip,
        mac: "06:00:00:00:00:01",
        tap: null,
        generation: 1,
        spec: {
          template: "minimal",
          templateVersion: "1",
          vcpu: 1,
          memoryMb: 256,
          diskGb: 1,
          env: {},
          owner: "u",
          sitePublic: true,
          secrets: { machine_id: "m", seed: "s", db_password: "d", encryption_key: "e", admin_password: "a" },
        },
      });
      const t = newMetadataToken();
      boxes.setMetadataToken(slug, t.sha256);
      tokens[slug] = t.token;
    }
    const clock = { t: Date.now() };
    app = await buildMetadataService({
      boxes,
      credentials: new GitCredentialCache(issuing(clock, 3_600_000), { now: () => new Date() }),
      checkSourceAddress: true,
      log: pino({ level: "silent" }),
    });
    url = await app.listen({ host: "127.0.0.1", port: 0 });
  });

  afterAll(async () => {
    await app?.close();
    db?.close();
    await rm(dir, { recursive: true, force: true });
  });

  const ask = (token: string) =>
    fetch(`${url}/v1/git-credential`, { headers: { authorization: `Bearer ${token}` } });

  it("answers the box calling from its own address", async () => {
    const res = await ask(tokens.here!);
    expect(res.status).toBe(200);
    expect(res.headers.get("cache-control")).toBe("no-store");
  });

  it("refuses a valid token used from another address", async () => {
    const res = await ask(tokens.elsewhere!);
    expect(res.status).toBe(401);
    expect(await res.json()).toEqual({
      error: { code: "unauthorized", message: "a valid box metadata token is required" },
    });
  });

  it("stops accepting a token once the box has a new one, and once the box is removed", async () => {
    const t = newMetadataToken();
    boxes.setMetadataToken("here", t.sha256);
    expect((await ask(tokens.here!)).status).toBe(401);
    expect((await ask(t.token)).status).toBe(200);
    boxes.remove("here");
    expect((await ask(t.token)).status).toBe(401);
  });
});
