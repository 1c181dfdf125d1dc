import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { poolLayout } from "../../src/cidr.ts";
import { ParkedStore } from "../../src/pool/parked.ts";
import { type Db, openStore, SCHEMA_VERSION } from "../../src/store/db.ts";
import { IpPool } from "../../src/store/ip-pool.ts";

/**
 * The warm pool's records when its size is lowered: which clones are surplus, and that a
 * retire and a claim never take the same clone (the real removal is tested on QEMU guests in
 * warm-pool.test.ts).
 */
describe("parked clones: retiring surplus", () => {
  let dir: string;
  let db: Db;
  let ipPool: IpPool;
  let store: ParkedStore;
  let clock = 0;

  /** A ready clone, each one newer than the last. */
  const ready = (slug: string, diskGb = 10, template = "minimal") => {
    store.insertFilling({ slug, template, diskGb, generation: 1 });
    store.markReady(slug);
  };
  const states = () => Object.fromEntries(store.all().map((p) => [p.slug, p.state]));

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "dbx-parked-store-"));
    db = openStore(dir);
    ipPool = new IpPool(db, poolLayout("10.0.0.0/16"));
    store = new ParkedStore(db, ipPool, () => new Date(Date.UTC(2026, 0, 1) + clock++ * 1000));
  });
  afterEach(() => {
    db.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("takes the newest ready clones past the target, one at a time, and none at or under it", () => {
    ready("pool-a");
    ready("pool-b");
    ready("pool-c");
    expect(store.takeSurplus("minimal", 10, 3)).toBeNull();
    expect(store.takeSurplus("minimal", 10, 1)?.slug).toBe("pool-c");
    expect(store.takeSurplus("minimal", 10, 1)?.slug).toBe("pool-b");
    expect(store.takeSurplus("minimal", 10, 1)).toBeNull();
    expect(states()).toEqual({ "pool-a": "ready", "pool-b": "retiring", "pool-c": "retiring" });
    // Retiring clones are no longer counted as ready.
    expect(store.counts().get("minimal")).toEqual({ ready: 1, filling: 0 });
    // Other templates are not touched by this one's size.
    ready("pool-code", 20, "code");
    expect(store.takeSurplus("minimal", 10, 0)?.slug).toBe("pool-a");
    expect(store.takeSurplus("minimal", 10, 0)).toBeNull();
    expect(states()["pool-code"]).toBe("ready");
  });

  it("counts filling clones toward the size but never retires them, nor claimed ones", () => {
    ready("pool-a");
    store.insertFilling({ slug: "pool-f", template: "minimal", diskGb: 10, generation: 1 });
    ready("pool-b");
    expect(store.claim("minimal", 10, "box-1")?.slug).toBe("pool-a");
    // Ready + filling = 2 against a size of 1: the ready one goes; the filling and claimed stay.
    expect(store.takeSurplus("minimal", 10, 1)?.slug).toBe("pool-b");
    expect(store.takeSurplus("minimal", 10, 0)).toBeNull();
    expect(states()).toEqual({ "pool-a": "claimed", "pool-b": "retiring", "pool-f": "filling" });
    expect(store.claimedFor("box-1")?.slug).toBe("pool-a");
  });

  it("retires clones of a data-volume size the pool no longer makes first, even under the target", () => {
    ready("pool-old", 20);
    ready("pool-new", 10);
    expect(store.takeSurplus("minimal", 10, 5)?.slug).toBe("pool-old");
    expect(store.takeSurplus("minimal", 10, 5)).toBeNull();
  });

  it("a claim and a retire racing for the last ready clone: one gets it, the other nothing", () => {
    ready("pool-a");
    // The retire first: the create finds no clone (and restores from the golden snapshot).
    expect(store.takeSurplus("minimal", 10, 0)?.slug).toBe("pool-a");
    expect(store.claim("minimal", 10, "box-1")).toBeNull();
    expect(ipPool.get("box-1")).toBeNull();
    // The claim first: the clone is the box's, and the shrink finds nothing to retire.
    ready("pool-b");
    expect(store.claim("minimal", 10, "box-2")?.slug).toBe("pool-b");
    expect(store.takeSurplus("minimal", 10, 0)).toBeNull();
    expect(states()).toEqual({ "pool-a": "retiring", "pool-b": "claimed" });
    // The retired clone's address is freed with its row; the claimed one's is the box's now.
    const addr = ipPool.get("pool-a");
    expect(addr).not.toBeNull();
    store.remove("pool-a");
    expect(ipPool.get("pool-a")).toBeNull();
    expect(ipPool.get("box-2")).not.toBeNull();
  });

  it("the migration that allows retiring keeps the clones an older agent parked", () => {
    ready("pool-a");
    expect(store.claim("minimal", 10, "box-1")?.slug).toBe("pool-a");
    ready("pool-b");
    // The store as the agent before it left it: the last migration (the table rebuild) runs again.
    db.pragma(`user_version = ${SCHEMA_VERSION - 1}`);
    db.close();
    db = openStore(dir);
    expect(db.pragma("user_version", { simple: true })).toBe(SCHEMA_VERSION);
    ipPool = new IpPool(db, poolLayout("10.0.0.0/16"));
    store = new ParkedStore(db, ipPool);
    expect(states()).toEqual({ "pool-a": "claimed", "pool-b": "ready" });
    expect(store.claimedFor("box-1")?.ip).toBe(ipPool.get("box-1"));
    expect(store.takeSurplus("minimal", 10, 0)?.slug).toBe("pool-b");
    expect(states()["pool-b"]).toBe("retiring");
  });
});
