import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tokenSha256 } from "../../src/metadata/tokens.ts";
import { tapNameForIp } from "../../src/net/naming.ts";
import { ParkedStore } from "../../src/pool/parked.ts";
import { buildMinimalImage, qemuUnavailable } from "../qemu/support.ts";
import { boxJobs, startCp, type TestCp, waitFor, waitForBox } from "../support/agent-harness.ts";
import { TestNetns } from "../support/netns.ts";
import { type PoolAgent, startPoolAgent } from "./support.ts";

const missing = qemuUnavailable();
if (missing) console.warn(`SKIPPING warm pool tests: ${missing} (CI must provide root, qemu, iproute2, apt)`);

const POOL_SIZE = 2;

/** The metadata blob (fw_cfg) the agent wrote for a VM directory, without padding. */
function metadataOf(
  dataDir: string,
  slug: string,
): { slug: string; generation: number; secrets: Record<string, string> } {
  return JSON.parse(readFileSync(join(dataDir, "qemu", "boxes", slug, "metadata.json"), "utf8").trim());
}

/**
 * The warm pool on real QEMU guests: clones restored and parked ahead of demand, claimed by
 * creates (the running guest fetches its box's identity from the metadata service and
 * applies it), refilled, adopted by a restarted agent, and cleaned up when orphaned.
 */
describe.skipIf(missing !== null)("warm pool on real QEMU", { timeout: 600_000 }, () => {
  let cp: TestCp;
  let ns: TestNetns;
  let dataDir: string;
  let pa: PoolAgent;

  const parkedRows = () => new ParkedStore(pa.agent.db, pa.agent.ipPool).all();
  const readyCount = () => pa.agent.pool.state().find((s) => s.template === "minimal")?.ready ?? 0;
  const waitFull = () =>
    waitFor("the pool to be full", () => readyCount() === POOL_SIZE, 300_000, 500).then(() =>
      pa.agent.pool.idle(),
    );

  beforeAll(async () => {
    buildMinimalImage("pool");
    ns = TestNetns.create("dbxp");
    dataDir = mkdtempSync(join(tmpdir(), "dbxp-"));
    cp = await startCp();
    pa = await startPoolAgent(cp, ns, dataDir, "pool", POOL_SIZE);
  }, 600_000);

  afterAll(async () => {
    if (pa) {
      // The agent first: its stop waits for a pool fill in flight, whose VM is then listed too.
      await pa.stop();
      for (const { slug } of await pa.executor.list())
        await pa.executor
          .remove(slug, { step: (_n, fn) => fn(), log: () => undefined })
          .catch(() => undefined);
    }
    await cp?.close();
    ns?.destroy();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it("fills the pool with parked clones that are nobody's box and reachable by no URL", async () => {
    await waitFull();
    const parked = pa.agent.pool.slugs();
    expect(parked.size).toBe(POOL_SIZE);
    for (const slug of parked) {
      expect(slug).toMatch(/^pool-[0-9a-f]{10}$/);
      expect(await pa.executor.inspect(slug)).toBe("running");
      expect(pa.agent.boxes.get(slug)).toBeNull();
      expect(pa.agent.routes.get(slug)).toBeUndefined();
      const meta = metadataOf(dataDir, slug);
      expect(meta).toMatchObject({ slug, generation: 1, parked: true });
      // Its parked bearer opens nothing a box's bearer opens.
      expect(pa.agent.boxes.byMetadataToken(tokenSha256(meta.secrets.metadata_token!))).toBeNull();
    }
    // The control plane never hears of them as VMs.
    await pa.agent.heartbeat.beatOnce();
    const server = await cp.admin.get(`/api/v1/servers/${cp.serverName}`);
    expect(JSON.stringify(server.body)).not.toContain("pool-");
  });

  it("concurrent creates racing for fewer clones each get a distinct clone or the golden path, and the box's own identity", async () => {
    const before = pa.agent.pool.slugs();
    const slugs = ["race-a", "race-b", "race-c"];
    const created = await Promise.all(
      slugs.map((name) =>
        cp.admin.post("/api/v1/boxes", { template: "minimal", name, env: { GREETING: `hello ${name}` } }),
      ),
    );
    expect(created.map((r) => r.status)).toEqual([202, 202, 202]);
    const boxes = await Promise.all(slugs.map((slug) => waitForBox(cp, slug, "running", 300_000)));
    expect(new Set(boxes.map((b) => b.ip)).size).toBe(3);

    const paths: string[] = [];
    for (const [i, slug] of slugs.entries()) {
      const [job] = await boxJobs(cp, slug);
      const steps = job.steps.map((s: { name: string }) => s.name);
      paths.push(steps.includes("claim_clone") ? "pool" : steps.includes("restore_vm") ? "golden" : "?");
      const ip = boxes[i].ip as string;
      // The running guest wears the box's identity: slug, hostname, env and machine id.
      expect(ns.curl(`http://${ip}:8000/`).trim()).toBe(slug);
      const identity = ns.curl(`http://${ip}:8000/cgi-bin/identity`);
      const stored = pa.agent.boxes.get(slug)!;
      expect(identity).toContain(`hostname=${slug}\n`);
      expect(identity).toContain(`greeting=hello ${slug}\n`);
      expect(identity).toContain(`machine_id=${stored.spec.secrets.machine_id}\n`);
      // The metadata token the box holds is its own and current; no parked bearer is left.
      const meta = metadataOf(dataDir, slug);
      expect(meta.slug).toBe(slug);
      expect(pa.agent.boxes.byMetadataToken(tokenSha256(meta.secrets.metadata_token!))?.slug).toBe(slug);
      expect(meta.secrets.machine_id).toBe(stored.spec.secrets.machine_id);
      expect(a_routes(slug)).toBe(`${ip}:8000`);
    }
    // Two clones were ready: two creates took one each, the third restored from the golden.
    expect(paths.filter((p) => p === "pool")).toHaveLength(POOL_SIZE);
    expect(paths.filter((p) => p === "golden")).toHaveLength(1);
    // No clone was handed out twice: each claimed clone's address went to exactly one box,
    // and none of the old clones is still parked.
    const after = pa.agent.pool.slugs();
    for (const s of before) expect(after.has(s)).toBe(false);
    // Secrets differ between boxes (nothing carried over from the pool or each other).
    const machineIds = slugs.map((s) => pa.agent.boxes.get(s)!.spec.secrets.machine_id);
    expect(new Set(machineIds).size).toBe(3);
    // The pool refills after the claims.
    await waitFull();
    for (const s of pa.agent.pool.slugs()) expect(before.has(s)).toBe(false);
  });

  it("a claimed box stops, starts and is deleted like any other", async () => {
    const [job] = await boxJobs(cp, "race-a");
    const slug = job.steps.some((s: { name: string }) => s.name === "claim_clone") ? "race-a" : "race-b";
    const ip = (await cp.admin.get(`/api/v1/boxes/${slug}`)).body.ip as string;
    await cp.admin.post(`/api/v1/boxes/${slug}/stop`);
    await waitForBox(cp, slug, "stopped", 120_000);
    expect(await pa.executor.inspect(slug)).toBe("stopped");
    await cp.admin.post(`/api/v1/boxes/${slug}/start`);
    await waitForBox(cp, slug, "running", 300_000);
    await waitFor(
      "guest answers after start",
      () => ns.curl(`http://${ip}:8000/`).trim() === slug,
      60_000,
      1000,
    );
    for (const s of ["race-a", "race-b", "race-c"]) await cp.admin.del(`/api/v1/boxes/${s}`);
    for (const s of ["race-a", "race-b", "race-c"]) {
      await waitFor(
        "deleted",
        async () => (await cp.admin.get(`/api/v1/boxes/${s}`)).status === 404,
        120_000,
      );
      expect(await pa.executor.inspect(s)).toBe("gone");
    }
  });

  it("a restarted agent adopts its ready clones, discards half-made ones, and reconcile removes orphans", async () => {
    await waitFull();
    const ready = pa.agent.pool.slugs();
    // A clone the last run was still making (its row says filling) and a VM nobody recorded.
    const [halfMade] = [...ready];
    pa.agent.db.prepare("UPDATE parked_vms SET state = 'filling' WHERE slug = ?").run(halfMade);
    await pa.stop();
    pa = await startPoolAgent(cp, ns, dataDir, "pool", POOL_SIZE);
    expect(await pa.executor.inspect(halfMade!)).toBe("gone");
    for (const s of ready) if (s !== halfMade) expect(pa.agent.pool.slugs().has(s)).toBe(true);
    await waitFull();
    expect(pa.agent.pool.slugs().has(halfMade!)).toBe(false);

    // An orphan: a parked clone whose record is gone (e.g. the store was restored from a backup).
    const [orphan] = [...pa.agent.pool.slugs()];
    pa.agent.db.prepare("DELETE FROM parked_vms WHERE slug = ?").run(orphan);
    const actions = await pa.agent.reconciler.reconcileOnce();
    expect(actions).toContainEqual({ kind: "removed_vm", slug: orphan });
    expect(await pa.executor.inspect(orphan!)).toBe("gone");
    expect(pa.agent.ipPool.get(orphan!)).toBeNull();
    // The clones still in the pool are untouched by that pass.
    for (const s of pa.agent.pool.slugs()) expect(await pa.executor.inspect(s)).toBe("running");
  });

  /** Everything a parked clone holds on the host, as the host shows it (not the agent's records). */
  function hostTraces(slug: string, ip: string): string[] {
    const traces: string[] = [];
    const tap = tapNameForIp(ip);
    if (existsSync(join(dataDir, "qemu", "boxes", slug))) traces.push("VM directory (disks, volume)");
    if (ns.exec("ip", ["-o", "link", "show"]).includes(`${tap}:`)) traces.push(`TAP ${tap}`);
    if (ns.exec("nft", ["list", "ruleset"]).includes(tap)) traces.push(`firewall element of ${tap}`);
    if (pa.agent.ipPool.get(slug) !== null) traces.push(`address ${ip}`);
    if (pa.agent.routes.get(slug)) traces.push("routes");
    return traces;
  }

  const setSize = async (size: number) => {
    const res = await cp.admin.request("PATCH", `/api/v1/servers/${cp.serverName}/warm-pool`, {
      sizes: { minimal: size },
    });
    expect(res.status).toBe(200);
    // The size reaches the agent with its next heartbeat answer.
    await pa.agent.heartbeat.beatOnce();
  };

  it("lowering the size retires surplus ready clones, leaving nothing of them on the host", async () => {
    // The orphan removed above left the pool short: the next heartbeat answer refills it.
    await setSize(POOL_SIZE);
    await waitFull();
    const before = parkedRows();
    expect(before.map((p) => p.state)).toEqual(["ready", "ready"]);
    await setSize(1);
    await waitFor("one clone retired", () => parkedRows().length === 1, 120_000, 250);
    await pa.agent.pool.idle();
    const [kept] = parkedRows();
    // The oldest stays (claims take the oldest); the newer one is gone with all it held.
    expect(kept).toMatchObject({ slug: before[0]!.slug, state: "ready" });
    expect(await pa.executor.inspect(kept!.slug)).toBe("running");
    const retired = before[1]!;
    expect(await pa.executor.inspect(retired.slug)).toBe("gone");
    expect(hostTraces(retired.slug, retired.ip!)).toEqual([]);
    expect(pa.agent.pool.state()).toContainEqual(
      expect.objectContaining({ target: 1, ready: 1, filling: 0 }),
    );
    // The control plane sees it with the next heartbeat.
    await pa.agent.heartbeat.beatOnce();
    const server = (await cp.admin.get(`/api/v1/servers/${cp.serverName}`)).body;
    expect(server.warmPool).toContainEqual(
      expect.objectContaining({ template: "minimal", size: 1, ready: 1 }),
    );
  });

  it("a create racing a shrink to 0 gets the clone or the golden path, never a half-removed clone", async () => {
    const [clone] = parkedRows();
    expect(clone?.state).toBe("ready");
    // Both at once: the create's claim and the shrink's retire meet at the one ready clone.
    const [created] = await Promise.all([
      cp.admin.post("/api/v1/boxes", { template: "minimal", name: "shrink-race" }),
      setSize(0),
    ]);
    expect(created.status).toBe(202);
    const box = await waitForBox(cp, "shrink-race", "running", 300_000);
    await pa.agent.pool.idle();
    const [job] = await boxJobs(cp, "shrink-race");
    const steps = job.steps.map((s: { name: string }) => s.name);
    const path = steps.includes("claim_clone") ? "pool" : "golden";
    // Either way the box is whole and its own.
    const ip = box.ip as string;
    expect(ns.curl(`http://${ip}:8000/`).trim()).toBe("shrink-race");
    expect(ns.curl(`http://${ip}:8000/cgi-bin/identity`)).toContain("hostname=shrink-race\n");
    expect(metadataOf(dataDir, "shrink-race").slug).toBe("shrink-race");
    // The clone either became the box (at its address) or was retired without a trace.
    if (path === "pool") expect(ip).toBe(clone!.ip);
    else expect(hostTraces(clone!.slug, clone!.ip!)).toEqual([]);
    expect(await pa.executor.inspect(clone!.slug)).toBe("gone");
    expect(parkedRows()).toEqual([]);
    console.log(`[warm pool] the create racing the shrink took the ${path} path`);
    await cp.admin.del("/api/v1/boxes/shrink-race");
    await waitFor(
      "deleted",
      async () => (await cp.admin.get("/api/v1/boxes/shrink-race")).status === 404,
      120_000,
    );
  });

  it("a shrink while a clone is being handed over leaves that clone to its box", async () => {
    await setSize(1);
    await waitFull1();
    const [clone] = parkedRows();
    const created = await cp.admin.post("/api/v1/boxes", { template: "minimal", name: "mid-claim" });
    expect(created.status).toBe(202);
    // The claim is made (the row is the box's), the hand-over not finished: shrink now.
    await waitFor("the clone claimed", () => pa.agent.pool.claimedFor("mid-claim") !== null, 120_000, 20);
    await setSize(0);
    const box = await waitForBox(cp, "mid-claim", "running", 300_000);
    await pa.agent.pool.idle();
    expect(box.ip).toBe(clone!.ip);
    const [job] = await boxJobs(cp, "mid-claim");
    expect(job.steps.map((s: { name: string }) => s.name)).toContain("claim_clone");
    expect(ns.curl(`http://${box.ip}:8000/`).trim()).toBe("mid-claim");
    expect(parkedRows()).toEqual([]);
    await cp.admin.del("/api/v1/boxes/mid-claim");
  });

  it("a create arriving while a retired clone is being removed restores from the golden instead", async () => {
    await setSize(1);
    await waitFull1();
    const [clone] = parkedRows();
    // The heartbeat answer's size 0 moves the clone to `retiring` before the pass's first await.
    await setSize(0);
    expect(parkedRows().map((p) => p.state)).toEqual(["retiring"]);
    const created = await cp.admin.post("/api/v1/boxes", { template: "minimal", name: "after-shrink" });
    expect(created.status).toBe(202);
    const box = await waitForBox(cp, "after-shrink", "running", 300_000);
    await pa.agent.pool.idle();
    const [job] = await boxJobs(cp, "after-shrink");
    const steps = job.steps.map((s: { name: string }) => s.name);
    expect(steps).not.toContain("claim_clone");
    expect(steps).toContain("restore_vm");
    expect(ns.curl(`http://${box.ip}:8000/`).trim()).toBe("after-shrink");
    expect(await pa.executor.inspect(clone!.slug)).toBe("gone");
    expect(hostTraces(clone!.slug, clone!.ip!)).toEqual([]);
    expect(parkedRows()).toEqual([]);
    await cp.admin.del("/api/v1/boxes/after-shrink");
  });

  const waitFull1 = () =>
    waitFor("one clone ready", () => readyCount() === 1, 300_000, 500).then(() => pa.agent.pool.idle());

  function a_routes(slug: string): string | null {
    return pa.agent.routes.get(slug)?.upstream(8000) ?? null;
  }
});
