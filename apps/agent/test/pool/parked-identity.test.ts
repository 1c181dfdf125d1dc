import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as delay } from "node:timers/promises";
import type { FastifyInstance } from "fastify";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { poolLayout } from "../../src/cidr.ts";
import { systemClock } from "../../src/clock.ts";
import { buildMetadataService } from "../../src/metadata/service.ts";
import { newMetadataToken } from "../../src/metadata/tokens.ts";
import { ParkedStore } from "../../src/pool/parked.ts";
import { WarmPool } from "../../src/pool/warm.ts";
import { BoxStore } from "../../src/store/boxes.ts";
import { type Db, openStore } from "../../src/store/db.ts";
import { IpPool } from "../../src/store/ip-pool.ts";
import type { BoxMetadata, StepReporter, Upstream } from "../../src/vmm/executor.ts";
import { testConfig, waitFor } from "../support/agent-harness.ts";
import { FakeExecutor } from "../support/fake-executor.ts";

/** The fake host with the one method a backend needs for a warm pool (the QEMU one is tested on real guests). */
class PoolCapableFake extends FakeExecutor {
  async claimParked(): Promise<Upstream> {
    return () => null;
  }
}

const noReport: StepReporter = { step: (_n, fn) => fn(), log: () => undefined };

function identity(slug: string, generation: number): BoxMetadata {
  return {
    slug,
    site_url: `http://${slug}.site.test`,
    code_url: `http://${slug}.code.test`,
    env: { OWNER_SECRET: `only-for-${slug}` },
    network: { ip: "10.0.0.2", prefix: 16, gateway: "10.0.0.1", mac: "06:00:0a:00:00:02", dns: [] },
    metadata_url: "http://10.0.0.1:8169",
    secrets: {
      machine_id: `m-${slug}`,
      seed: "s",
      db_password: `db-${slug}`,
      encryption_key: "e",
      admin_password: "a",
      metadata_token: `box-token-${slug}`,
    },
    issued_at: 0,
    generation,
  };
}

/**
 * The warm pool's trust boundary at the metadata service: only a parked clone's own bearer
 * (from its own address in tap mode) waits for an identity, it gets only the identity handed
 * to that clone, a box's bearer gets nothing there, a parked bearer opens nothing a box's
 * does, and no request of a guest can claim a clone.
 */
describe("parked clones at the metadata service", () => {
  let dir: string;
  let db: Db;
  let parked: ParkedStore;
  let pool: WarmPool;
  let boxes: BoxStore;
  let app: FastifyInstance;
  let strict: FastifyInstance;
  let base = "";
  let strictBase = "";
  const tokens = new Map<string, string>();
  /** Guests whose wait reached the pool (so a test knows both are waiting before it claims). */
  let waits = 0;

  const poll = (url: string, token: string) =>
    fetch(`${url}/v1/parked/identity`, { headers: { authorization: `Bearer ${token}` } });

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "dbx-parked-"));
    db = openStore(dir);
    const ipPool = new IpPool(db, poolLayout("10.0.0.0/16"));
    parked = new ParkedStore(db, ipPool);
    boxes = new BoxStore(db);
    const config = testConfig({ controlPlaneUrl: "http://127.0.0.1:1", dataDir: dir });
    const log = pino({ level: "silent" });
    pool = new WarmPool({
      config,
      executor: new PoolCapableFake(),
      ipPool,
      parked,
      clock: systemClock,
      log,
      report: noReport,
    });
    for (const slug of ["pool-aaaaaaaaaa", "pool-bbbbbbbbbb"]) {
      parked.insertFilling({ slug, template: "minimal", diskGb: 10, generation: 1 });
      const t = newMetadataToken();
      parked.setToken(slug, t.sha256);
      parked.markReady(slug);
      tokens.set(slug, t.token);
    }
    // A box on the host with its own bearer.
    const boxToken = newMetadataToken();
    boxes.upsert({
      slug: "victim",
      desiredState: "running",
      spec: {
        template: "minimal",
        templateVersion: "1",
        vcpu: 1,
        memoryMb: 256,
        diskGb: 10,
        env: {},
        owner: "u1",
        sitePublic: false,
        secrets: { machine_id: "m", seed: "s", db_password: "d", encryption_key: "e", admin_password: "a" },
      },
      ip: "10.0.0.9",
      mac: "06:00:0a:00:00:09",
      tap: null,
      generation: 1,
    });
    boxes.setMetadataToken("victim", boxToken.sha256);
    tokens.set("victim", boxToken.token);
    const deps = {
      boxes,
      credentials: { get: async () => ({ unavailable: "none" }), forget: () => false },
      pool: {
        byToken: (sha: string) => pool.byToken(sha),
        waitForIdentity: (slug: string, ms: number, signal?: AbortSignal) => {
          waits++;
          return pool.waitForIdentity(slug, ms, signal);
        },
      },
      identityPollMs: 300,
      log,
    };
    app = await buildMetadataService({ ...deps, checkSourceAddress: false });
    base = await app.listen({ host: "127.0.0.1", port: 0 });
    strict = await buildMetadataService({ ...deps, checkSourceAddress: true });
    strictBase = await strict.listen({ host: "127.0.0.1", port: 0 });
  });

  afterAll(async () => {
    await app?.close();
    await strict?.close();
    db?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("a parked clone waits and gets 204 while nobody claimed it", async () => {
    const res = await poll(base, tokens.get("pool-aaaaaaaaaa")!);
    expect(res.status).toBe(204);
  });

  it("refuses a box's bearer, a missing or forged one, and a parked bearer from another address", async () => {
    expect((await poll(base, tokens.get("victim")!)).status).toBe(401);
    expect((await poll(base, "forged")).status).toBe(401);
    expect((await fetch(`${base}/v1/parked/identity`)).status).toBe(401);
    // Tap mode: the clone's address is 10.0.0.x; this request comes from 127.0.0.1.
    expect((await poll(strictBase, tokens.get("pool-aaaaaaaaaa")!)).status).toBe(401);
  });

  it("a parked bearer opens nothing a box's bearer opens", async () => {
    const auth = { authorization: `Bearer ${tokens.get("pool-aaaaaaaaaa")!}` };
    expect((await fetch(`${base}/v1/git-credential`, { headers: auth })).status).toBe(401);
    expect((await fetch(`${base}/v1/activity`, { method: "POST", headers: auth })).status).toBe(401);
  });

  it("no guest request claims a clone", async () => {
    for (const method of ["POST", "PUT", "PATCH", "DELETE"]) {
      const res = await fetch(`${base}/v1/parked/identity`, {
        method,
        headers: { authorization: `Bearer ${tokens.get("victim")!}`, "content-type": "application/json" },
        body: JSON.stringify({ slug: "victim" }),
      });
      expect(res.status).toBe(404);
    }
    expect(parked.all().map((p) => p.state)).toEqual(["ready", "ready"]);
  });

  it("a claimed clone gets exactly its box's identity; the other clone never sees it", async () => {
    const before = waits;
    const waiting = poll(base, tokens.get("pool-aaaaaaaaaa")!);
    const other = poll(base, tokens.get("pool-bbbbbbbbbb")!);
    await waitFor("both clones waiting", () => waits === before + 2, 5_000, 5);
    const claimed = pool.claim("minimal", 10, "alpha");
    expect(claimed?.slug).toBe("pool-aaaaaaaaaa");
    pool.deliver(claimed!.slug, identity("alpha", 2));
    const res = await waiting;
    expect(res.status).toBe(200);
    const text = await res.text();
    // Generation first: the guest reads it from the first bytes.
    expect(text.startsWith('{"generation":2,')).toBe(true);
    expect(JSON.parse(text)).toEqual(identity("alpha", 2));
    const o = await other;
    expect(o.status).toBe(204);
    expect(await o.text()).toBe("");
    // Asked again (a lost answer), the claimed clone gets the same identity.
    expect(JSON.parse(await (await poll(base, tokens.get("pool-aaaaaaaaaa")!)).text()).slug).toBe("alpha");
    // The shell form the minimal image asks for (metadata/shell.ts): the same identity,
    // behind the same bearer.
    const shell = (token: string) =>
      fetch(`${base}/v1/parked/identity?format=shell`, { headers: { authorization: `Bearer ${token}` } });
    const sh = await shell(tokens.get("pool-aaaaaaaaaa")!);
    expect(sh.status).toBe(200);
    expect(sh.headers.get("content-type")).toMatch(/^text\/plain/);
    const body = await sh.text();
    expect(body.startsWith("M_generation='2'\n")).toBe(true);
    expect(body).toContain("M_slug='alpha'\n");
    expect(body).toContain("M_secrets_metadata_token='box-token-alpha'\n");
    expect(body).toContain("M_env_file='export OWNER_SECRET='\\''only-for-alpha'\\''\n'");
    expect((await shell(tokens.get("victim")!)).status).toBe(401);
    expect((await shell(tokens.get("pool-bbbbbbbbbb")!)).status).toBe(204);
  });

  it("racing claims take each clone once; a handed-over clone's bearer stops working", async () => {
    const results = await Promise.all(
      ["b1", "b2", "b3"].map(async (box) => pool.claim("minimal", 10, box)?.slug ?? null),
    );
    expect(results.filter((r) => r !== null)).toEqual(["pool-bbbbbbbbbb"]);
    // Another size or template finds nothing.
    expect(pool.claim("minimal", 20, "b4")).toBeNull();
    expect(pool.claim("code", 10, "b5")).toBeNull();
    // Each claim moved the clone's address to its box, once.
    const winner = ["b1", "b2", "b3"][results.indexOf("pool-bbbbbbbbbb")]!;
    expect(parked.claimedFor(winner)?.slug).toBe("pool-bbbbbbbbbb");
    pool.handedOver("pool-aaaaaaaaaa");
    expect((await poll(base, tokens.get("pool-aaaaaaaaaa")!)).status).toBe(401);
    // Delivering to a clone that is not claimed is refused.
    expect(() => pool.deliver("pool-aaaaaaaaaa", identity("x", 2))).toThrow();
  });

  it("a discarded clone's waiting guest is answered at once, not when its poll runs out", async () => {
    const slug = "pool-cccccccccc";
    parked.insertFilling({ slug, template: "code", diskGb: 10, generation: 1 });
    parked.markReady(slug);
    const waiting = pool.waitForIdentity(slug, 60_000);
    await pool.discard(slug);
    const answer = await Promise.race([waiting, delay(5_000).then(() => "still waiting")]);
    expect(answer).toBeNull();
    expect(parked.get(slug)).toBeNull();
  });
});
