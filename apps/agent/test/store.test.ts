import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import Database from "better-sqlite3";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { poolLayout } from "../src/cidr.ts";
import { loadConfig, parseConfig } from "../src/config.ts";
import { AgentError } from "../src/errors.ts";
import { boxCorrection } from "../src/loops/reconcile.ts";
import { type Db, openStore, SCHEMA_VERSION } from "../src/store/db.ts";
import { IpPool } from "../src/store/ip-pool.ts";
import { JobStore } from "../src/store/jobs.ts";

describe("agent store (real SQLite file)", () => {
  let dir: string;
  let db: Db;

  beforeEach(async () => {
    dir = await mkdtemp(path.join(tmpdir(), "doppio-store-"));
    db = openStore(dir);
  });
  afterEach(async () => {
    db.close();
    await rm(dir, { recursive: true, force: true });
  });

  it("creates the schema once, in WAL mode, and reopens without migrating again", () => {
    expect(db.pragma("journal_mode", { simple: true })).toBe("wal");
    expect(db.pragma("user_version", { simple: true })).toBe(SCHEMA_VERSION);
    new JobStore(db).insert({ id: "j1", action: "create", box: "a", payload: {}, receivedAt: "t" });
    db.close();
    db = openStore(dir);
    expect(new JobStore(db).get("j1")?.status).toBe("queued");
  });

  it("refuses a store written by a newer agent", () => {
    db.close();
    const raw = new Database(path.join(dir, "agent.sqlite"));
    raw.pragma(`user_version = ${SCHEMA_VERSION + 1}`);
    raw.close();
    expect(() => openStore(dir)).toThrow(/newer than this agent/);
    db = openStore(path.join(dir, "fresh"));
  });

  it("allocates the whole pool except network, gateway, golden and broadcast; idempotent per slug", () => {
    const pool = new IpPool(db, poolLayout("192.168.7.0/29"));
    expect(pool.gateway()).toBe("192.168.7.1");
    expect(pool.golden()).toBe("192.168.7.6");
    const got = ["a", "b", "c", "d"].map((s) => pool.allocate(s));
    expect(got).toEqual(["192.168.7.2", "192.168.7.3", "192.168.7.4", "192.168.7.5"]);
    expect(pool.allocate("b")).toBe("192.168.7.3");
    let err: unknown;
    try {
      pool.allocate("e");
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(AgentError);
    expect((err as AgentError).code).toBe("ip_pool_exhausted");
    expect((err as AgentError).message).toBe(
      "no free address in 192.168.7.0/29: all 4 box addresses are allocated",
    );
    expect(pool.free("c")).toBe(true);
    expect(pool.free("c")).toBe(false);
    expect(pool.allocate("e")).toBe("192.168.7.4");
  });

  it("keeps one address per slug and one slug per address at the schema level", () => {
    const pool = new IpPool(db, poolLayout("10.0.0.0/16"));
    pool.allocate("a");
    expect(() =>
      db
        .prepare(
          "INSERT INTO ip_allocations (ip, ip_num, slug, allocated_at) VALUES ('10.0.0.9', 9, 'a', 't')",
        )
        .run(),
    ).toThrow(/UNIQUE/);
    expect(() =>
      db
        .prepare(
          "INSERT INTO ip_allocations (ip, ip_num, slug, allocated_at) VALUES ('10.0.0.2', 167772162, 'z', 't')",
        )
        .run(),
    ).toThrow(/UNIQUE|PRIMARY/);
  });

  it("numbers events per job from 1, writes the result once, and tracks delivery", () => {
    const jobs = new JobStore(db);
    expect(jobs.insert({ id: "j1", action: "create", box: "a", payload: { x: 1 }, receivedAt: "t" })).toBe(
      true,
    );
    expect(jobs.insert({ id: "j1", action: "create", box: "a", payload: { x: 2 }, receivedAt: "t" })).toBe(
      false,
    );
    jobs.insert({ id: "j2", action: "stop", box: "b", payload: {}, receivedAt: "t" });
    expect(jobs.append("j1", { type: "started", at: "t" })).toBe(1);
    expect(jobs.append("j2", { type: "started", at: "t" })).toBe(1);
    expect(jobs.append("j1", { type: "step", at: "t", name: "check_state", status: "running" })).toBe(2);
    expect(jobs.finish("j1", { ok: true, data: { ip: "10.0.0.2" } }, "t")).toBe(3);
    expect(jobs.finish("j1", { ok: false, error: "again" }, "t")).toBeNull();
    expect(jobs.get("j1")).toMatchObject({ status: "done", ok: true, lastSeq: 3, payload: { x: 1 } });
    expect(jobs.heldIds()).toEqual(["j2"]);
    expect([...jobs.pending(500).get("j1")!].map((r) => r.seq)).toEqual([1, 2, 3]);
    expect(jobs.markDelivered("j1", 2)).toBe(2);
    expect(jobs.backlog()).toBe(2);
    expect(
      jobs
        .pending(500)
        .get("j1")!
        .map((r) => r.event.type),
    ).toEqual(["result"]);
  });

  it("prunes finished jobs once delivered (or host-local) and past the cutoff, never one with events still to send", () => {
    const jobs = new JobStore(db);
    const old = "2026-01-01T00:00:00.000Z";
    const recent = "2026-01-03T00:00:00.000Z";
    const cutoff = "2026-01-02T00:00:00.000Z";
    const finished = (id: string, at: string, o: { local?: boolean; deliver?: boolean } = {}) => {
      jobs.insert({ id, action: "stop", box: id, payload: {}, local: o.local ?? false, receivedAt: at });
      jobs.append(id, { type: "started", at });
      const seq = jobs.finish(id, { ok: true, data: { ip: "10.0.0.2" } }, at)!;
      if (o.deliver) jobs.markDelivered(id, seq);
    };
    finished("delivered-old", old, { deliver: true });
    finished("undelivered-old", old);
    finished("delivered-recent", recent, { deliver: true });
    finished("local-old", old, { local: true });
    jobs.insert({ id: "queued", action: "start", box: "q", payload: {}, receivedAt: old });
    finished("set-aside-old", old);
    jobs.markDead("set-aside-old");

    expect(jobs.prune(cutoff)).toBe(3);
    const left = db.prepare("SELECT id FROM jobs ORDER BY id").all() as Array<{ id: string }>;
    expect(left.map((r) => r.id)).toEqual(["delivered-recent", "queued", "undelivered-old"]);
    const events = db.prepare("SELECT DISTINCT job_id FROM outbox ORDER BY job_id").all() as Array<{
      job_id: string;
    }>;
    expect(events.map((r) => r.job_id)).toEqual(["delivered-recent", "undelivered-old"]);
    // What is left still delivers as before.
    expect([...jobs.pending(500).keys()]).toEqual(["undelivered-old"]);
    expect(jobs.prune(cutoff)).toBe(0);
  });

  it("puts running jobs back in the queue on recovery, in arrival order", () => {
    const jobs = new JobStore(db);
    for (const id of ["a", "b", "c"])
      jobs.insert({ id, action: "start", box: id, payload: {}, receivedAt: "t" });
    jobs.markRunning("b");
    jobs.markRunning("a");
    jobs.finish("a", { ok: true }, "t");
    expect(jobs.requeueRunning()).toBe(1);
    expect(jobs.unfinished().map((j) => [j.id, j.status, j.attempt])).toEqual([
      ["b", "queued", 1],
      ["c", "queued", 0],
    ]);
  });
});

describe("config", () => {
  const base = {
    controlPlaneUrl: "https://cp.example.test",
    serverToken: "dpa_0123456789",
    dataDir: "/var/lib/doppio-agent",
    domain: "fc-01.example.test",
    apiToken: "0123456789abcdef0123",
  };

  it("fills defaults: bridge, CIDR, listen address, intervals", () => {
    const c = parseConfig(base);
    expect(c.bridge).toEqual({ name: "br-devbox", cidr: "10.0.0.0/16" });
    expect(c.listen).toBe("127.0.0.1:8090");
    expect(c.reconcileIntervalMs).toBe(30_000);
    const l = poolLayout(c.bridge.cidr);
    expect([l.gateway, l.golden, l.first, l.last].map((n) => n.toString(16))).toEqual([
      "a000001",
      "a00fffe",
      "a000002",
      "a00fffd",
    ]);
  });

  it("accepts the shipped example file", () => {
    const file = path.join(path.dirname(fileURLToPath(import.meta.url)), "../config.example.yaml");
    const c = loadConfig(["--config", file], { DOPPIO_AGENT_API_TOKEN: "from-the-environment-0123" });
    expect(c).toMatchObject({ backend: "qemu", concurrency: 4, apiToken: "from-the-environment-0123" });
    expect(c.edge?.tls.mode).toBe("https");
  });

  it("lets environment variables override the file", () => {
    const c = parseConfig(base, { DOPPIO_AGENT_CONCURRENCY: "9", DOPPIO_AGENT_CIDR: "10.5.0.0/24" });
    expect(c.concurrency).toBe(9);
    expect(c.bridge.cidr).toBe("10.5.0.0/24");
  });

  it("lists every invalid field in one error", () => {
    let message = "";
    try {
      parseConfig({
        ...base,
        controlPlaneUrl: "nope",
        apiToken: "short",
        bridge: { cidr: "10.0.0.0/30" },
        bogus: 1,
      });
    } catch (e) {
      expect((e as AgentError).code).toBe("config_invalid");
      message = (e as Error).message;
    }
    expect(message).toContain("controlPlaneUrl:");
    expect(message).toContain("apiToken:");
    expect(message).toContain("bridge.cidr: CIDR prefix must be between /8 and /29");
    expect(message).toMatch(/bogus/);
  });
});

describe("reconcile decisions (pure)", () => {
  it("starts a box that should run and has disks but no VMM", () => {
    expect(boxCorrection("running", "exited", "running")).toBe("start");
    expect(boxCorrection("running", "stopped", undefined)).toBe("start");
  });
  it("never boots a box with nothing on disk, and never stops one on its own", () => {
    expect(boxCorrection("running", "gone", undefined)).toBeNull();
    expect(boxCorrection("stopped", "running", "stopped")).toBeNull();
  });
  it("restores missing routes for running and stopped boxes", () => {
    expect(boxCorrection("running", "running", undefined)).toBe("publish_running");
    expect(boxCorrection("running", "running", "stopped")).toBe("publish_running");
    expect(boxCorrection("running", "running", "running")).toBeNull();
    expect(boxCorrection("stopped", "stopped", undefined)).toBe("publish_stopped");
    expect(boxCorrection("stopped", "stopped", "stopped")).toBeNull();
  });
});
