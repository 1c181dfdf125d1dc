import type { JobEvent } from "@doppio/contracts";
import { describe, expect, it } from "vitest";
import { applyJobEvents, type JobState } from "../src/domain/job-events.ts";
import { type Candidate, type PoolOnServer, placeBox, poolReservation } from "../src/domain/placement.ts";

const now = new Date("2026-01-01T12:00:00Z");
const server = (over: Partial<Candidate>): Candidate => ({
  id: over.name ?? "s",
  name: "s",
  status: "active",
  lastHeartbeatAt: new Date(now.getTime() - 1000),
  capacity: { vcpu: 8, memoryMb: 16384, diskGb: 100 },
  used: { vcpu: 0, memoryMb: 0, diskGb: 0 },
  golden: "ready",
  ...over,
});
const small = { vcpu: 1, memoryMb: 2048, diskGb: 10 };
const opts = { now, heartbeatFreshMs: 90_000, allowColdBoot: false };

describe("placement", () => {
  it("picks the ready server with the most free memory", () => {
    const result = placeBox(
      [server({ name: "a", used: { vcpu: 0, memoryMb: 8000, diskGb: 0 } }), server({ name: "b" })],
      small,
      opts,
    );
    expect(result.ok && result.server.name).toBe("b");
  });

  it("ranks the other servers that fit, best first, for a create that finds the best one busy", () => {
    const result = placeBox(
      [
        server({ name: "half", used: { vcpu: 4, memoryMb: 0, diskGb: 0 } }),
        server({ name: "full", used: { vcpu: 8, memoryMb: 0, diskGb: 0 } }),
        server({ name: "empty" }),
        server({ name: "most", used: { vcpu: 6, memoryMb: 0, diskGb: 0 } }),
      ],
      small,
      opts,
    );
    expect(result.ok && [result.server, ...result.others].map((s) => s.name)).toEqual([
      "empty",
      "half",
      "most",
    ]);
  });

  it("refuses stale, inactive, full and not-ready servers, saying why", () => {
    const result = placeBox(
      [
        server({ name: "stale", lastHeartbeatAt: new Date(now.getTime() - 120_000) }),
        server({ name: "failed", status: "error" }),
        server({ name: "full", used: { vcpu: 8, memoryMb: 0, diskGb: 0 } }),
        server({ name: "cold", golden: "missing" }),
      ],
      small,
      opts,
    );
    expect(result.ok).toBe(false);
    if (!result.ok) {
      expect(result.reasons).toEqual([
        "stale: agent not heard from recently",
        "failed: not active",
        "full: not enough vcpu",
        "cold: template not ready",
      ]);
    }
  });

  it("lets the default template cold-boot where no golden snapshot is ready, preferring a ready one", () => {
    const cold = placeBox([server({ name: "cold", golden: "missing" })], small, {
      ...opts,
      allowColdBoot: true,
    });
    expect(cold.ok).toBe(true);
    const both = placeBox(
      [
        server({ name: "a-cold", golden: null }),
        server({ name: "b-ready", used: { vcpu: 0, memoryMb: 9000, diskGb: 0 } }),
      ],
      small,
      { ...opts, allowColdBoot: true },
    );
    expect(both.ok && both.server.name).toBe("b-ready");
  });

  it("spreads by the scarcest resource, relative to each server's size", () => {
    // "cpu-bound" has the most free memory but almost no vCPU left; "disk-bound" the same
    // with disk; "balanced" has less memory free yet the most headroom overall.
    const result = placeBox(
      [
        server({ name: "cpu-bound", used: { vcpu: 6, memoryMb: 0, diskGb: 0 } }),
        server({ name: "disk-bound", used: { vcpu: 0, memoryMb: 0, diskGb: 85 } }),
        server({ name: "balanced", used: { vcpu: 2, memoryMb: 4096, diskGb: 20 } }),
      ],
      small,
      opts,
    );
    expect(result.ok && result.server.name).toBe("balanced");
    // Relative, not absolute: an empty small host beats a big one that is 90% full, though
    // the big one has more memory free.
    const sized = placeBox(
      [
        server({
          name: "big",
          capacity: { vcpu: 64, memoryMb: 262144, diskGb: 2000 },
          used: { vcpu: 58, memoryMb: 235930, diskGb: 1800 },
        }),
        server({ name: "small", capacity: { vcpu: 4, memoryMb: 8192, diskGb: 40 } }),
      ],
      small,
      opts,
    );
    expect(sized.ok && sized.server.name).toBe("small");
  });

  const pool = (over: Partial<PoolOnServer> = {}): PoolOnServer => ({
    template: "minimal",
    target: 1,
    ready: 1,
    filling: 0,
    diskGb: 10,
    memoryMb: 256,
    ...over,
  });
  const forMinimal = { ...opts, template: "minimal" };

  it("passes over a busy best server only for one as good but for headroom", () => {
    // Never for one that would cold-boot where the best restores, nor restore where it has a clone ready.
    const cold = server({ name: "cold", golden: "missing" });
    expect(
      placeBox([server({ name: "golden" }), cold], small, { ...opts, allowColdBoot: true }),
    ).toMatchObject({
      ok: true,
      server: { name: "golden" },
      others: [],
    });
    const pooled = server({ name: "pooled", pools: [pool()] });
    expect(placeBox([pooled, server({ name: "plain" })], small, forMinimal)).toMatchObject({
      ok: true,
      server: { name: "pooled" },
      others: [],
    });
    // When no golden is ready anywhere, servers that would cold-boot are as good as each other.
    const cold2 = server({ name: "cold-2", golden: "missing" });
    expect(placeBox([cold, cold2], small, { ...opts, allowColdBoot: true })).toMatchObject({
      ok: true,
      server: { name: "cold" },
      others: [{ name: "cold-2" }],
    });
  });

  it("prefers a server with a ready warm-pool clone of the template over more headroom", () => {
    const roomy = server({ name: "roomy" });
    const pooled = server({ name: "pooled", pools: [pool()], used: { vcpu: 4, memoryMb: 8000, diskGb: 50 } });
    expect(placeBox([roomy, pooled], small, forMinimal)).toMatchObject({
      ok: true,
      server: { name: "pooled" },
    });
    // An empty pool counts for nothing; a full server is still refused.
    const drained = { ...pooled, pools: [pool({ ready: 0, filling: 1 })] };
    expect(placeBox([roomy, drained], small, forMinimal)).toMatchObject({
      ok: true,
      server: { name: "roomy" },
    });
    const full = { ...pooled, used: { vcpu: 8, memoryMb: 16384, diskGb: 100 } };
    expect(placeBox([roomy, full], small, forMinimal)).toMatchObject({ ok: true, server: { name: "roomy" } });
    // Another template's clones, or clones of another data-volume size, cannot be claimed by this create.
    const other = { ...pooled, pools: [pool({ template: "code", diskGb: 20, memoryMb: 1536 })] };
    expect(placeBox([roomy, other], small, forMinimal)).toMatchObject({
      ok: true,
      server: { name: "roomy" },
    });
    const medium = { vcpu: 2, memoryMb: 4096, diskGb: 20 };
    expect(placeBox([roomy, pooled], medium, forMinimal)).toMatchObject({
      ok: true,
      server: { name: "roomy" },
    });
  });

  it("reserves each pool's clones at their real size: the template's data volume and memory", () => {
    // 100 GB disk, 80 used by boxes; a pool of 2 `code` clones with 20 GB volumes each holds
    // 40 more: no room for a 10 GB box (at a 10 GB guess per clone there would have been).
    const codePool = pool({ template: "code", target: 2, ready: 2, diskGb: 20, memoryMb: 1536 });
    const host = server({ name: "host", used: { vcpu: 1, memoryMb: 2048, diskGb: 60 }, pools: [codePool] });
    expect(poolReservation([codePool])).toEqual({ vcpu: 0, memoryMb: 3072, diskGb: 40 });
    expect(placeBox([host], small, forMinimal)).toEqual({
      ok: false,
      reasons: ["host: not enough diskGb"],
    });
    expect(placeBox([{ ...host, pools: [{ ...codePool, diskGb: 10 }] }], small, forMinimal)).toMatchObject({
      ok: true,
    });
    // Memory too: 16 GB, 8 GB used, a pool of 4 clones of 2 GB guests leaves nothing for a 2 GB box.
    const bigPool = pool({ target: 4, ready: 4, memoryMb: 2048, diskGb: 1 });
    const tight = server({ name: "tight", used: { vcpu: 1, memoryMb: 8192, diskGb: 0 }, pools: [bigPool] });
    expect(placeBox([tight], small, forMinimal)).toEqual({
      ok: false,
      reasons: ["tight: not enough memoryMb"],
    });
    // A pool counts at the larger of its size and the clones it holds: filling up to a size of 3,
    // or still holding 3 after its size was lowered to 1.
    expect(poolReservation([pool({ target: 3, ready: 1, filling: 0 })]).diskGb).toBe(30);
    expect(poolReservation([pool({ target: 1, ready: 3, filling: 0 })]).diskGb).toBe(30);
    expect(poolReservation([pool({ target: 0, ready: 0, filling: 0 })]).diskGb).toBe(0);
    // Pools count against headroom too: the emptier host wins.
    const a = server({ name: "a", pools: [pool({ target: 4, ready: 4, diskGb: 20 })] });
    const b = server({ name: "b", used: { vcpu: 0, memoryMb: 0, diskGb: 40 } });
    expect(placeBox([a, b], small, opts)).toMatchObject({ ok: true, server: { name: "b" } });
  });

  it("places nothing on draining or disabled servers", () => {
    const result = placeBox(
      [server({ name: "draining", status: "draining" }), server({ name: "disabled", status: "disabled" })],
      small,
      opts,
    );
    expect(result).toEqual({ ok: false, reasons: ["draining: not active", "disabled: not active"] });
  });

  it("reports an empty fleet", () => {
    expect(placeBox([], small, opts)).toEqual({ ok: false, reasons: ["no servers registered"] });
  });
});

const fresh = (): JobState => ({
  status: "delivered",
  lastSeq: 0,
  steps: [],
  log: "",
  error: null,
  errorCode: null,
  result: null,
  startedAt: null,
  finishedAt: null,
});
const at = (s: number) => new Date(now.getTime() + s * 1000).toISOString();

describe("job events", () => {
  const events: JobEvent[] = [
    { seq: 1, at: at(0), type: "started" },
    { seq: 2, at: at(1), type: "step", name: "allocate_ip", status: "running" },
    { seq: 3, at: at(2), type: "step", name: "allocate_ip", status: "succeeded" },
    { seq: 4, at: at(3), type: "result", ok: true, data: { ip: "10.0.0.2" } },
  ];

  it("records steps with start and end times, then the result", () => {
    const { state, applied } = applyJobEvents("create", fresh(), events);
    expect(applied).toHaveLength(4);
    expect(state.status).toBe("succeeded");
    expect(state.steps).toEqual([
      { name: "allocate_ip", status: "succeeded", startedAt: at(1), finishedAt: at(2), detail: null },
    ]);
    expect(state.result).toEqual({ ip: "10.0.0.2" });
    expect(state.lastSeq).toBe(4);
  });

  it("shows a step run again (the job resumed after an agent restart) once, where it first ran, with its latest run", () => {
    const { state } = applyJobEvents("start", fresh(), [
      { seq: 1, at: at(0), type: "started" },
      { seq: 2, at: at(1), type: "step", name: "check_state", status: "running" },
      { seq: 3, at: at(2), type: "step", name: "check_state", status: "succeeded" },
      { seq: 4, at: at(3), type: "step", name: "wait_ready", status: "running" },
      // The agent restarted: the job runs again from its start.
      { seq: 5, at: at(10), type: "step", name: "check_state", status: "running" },
      { seq: 6, at: at(11), type: "step", name: "check_state", status: "succeeded" },
      { seq: 7, at: at(12), type: "step", name: "wait_ready", status: "running" },
      { seq: 8, at: at(14), type: "step", name: "wait_ready", status: "succeeded" },
      { seq: 9, at: at(15), type: "step", name: "add_routes", status: "running" },
      { seq: 10, at: at(15), type: "step", name: "add_routes", status: "succeeded" },
    ]);
    expect(state.steps).toEqual([
      { name: "check_state", status: "succeeded", startedAt: at(10), finishedAt: at(11), detail: null },
      { name: "wait_ready", status: "succeeded", startedAt: at(3), finishedAt: at(14), detail: null },
      { name: "add_routes", status: "succeeded", startedAt: at(15), finishedAt: at(15), detail: null },
    ]);
  });

  it("ignores replays and stale sequences", () => {
    const first = applyJobEvents("create", fresh(), events.slice(0, 3)).state;
    const again = applyJobEvents("create", first, events.slice(0, 3));
    expect(again.applied).toHaveLength(0);
    expect(again.state).toEqual(first);
  });

  it("stops at a gap instead of applying out of order", () => {
    const { state, applied } = applyJobEvents("create", fresh(), [events[0]!, events[2]!, events[3]!]);
    expect(applied.map((e) => e.seq)).toEqual([1]);
    expect(state.lastSeq).toBe(1);
    expect(state.status).toBe("running");
  });

  it("never changes a finished job", () => {
    const done = applyJobEvents("create", fresh(), events).state;
    const late: JobEvent = { seq: 5, at: at(9), type: "result", ok: false, error: "late" };
    expect(applyJobEvents("create", done, [late])).toEqual({ state: done, applied: [], outcome: null });
  });

  it("fails a job with the agent's reason and its code", () => {
    const { state, outcome } = applyJobEvents("create", fresh(), [
      { seq: 1, at: at(0), type: "result", ok: false, code: "ip_pool_exhausted", error: "no free address" },
    ]);
    expect(state).toMatchObject({
      status: "failed",
      error: "no free address",
      errorCode: "ip_pool_exhausted",
    });
    expect(outcome).toEqual({
      action: "create",
      ok: false,
      code: "ip_pool_exhausted",
      error: "no free address",
    });
  });

  it("reads a success as its action's typed result", () => {
    const { outcome } = applyJobEvents("create", fresh(), events);
    expect(outcome).toEqual({ action: "create", ok: true, data: { ip: "10.0.0.2" } });
    const deleted = applyJobEvents("delete", fresh(), [{ seq: 1, at: at(0), type: "result", ok: true }]);
    expect(deleted.outcome).toEqual({ action: "delete", ok: true, data: {} });
  });

  // A result that breaks its action's contract is applied (the job ends), but as a failure
  // that says why, so the box is never settled from it.
  it.each([
    ["a create without its address", "create", { ok: true, data: {} }, /ip: /],
    ["a create whose address is no IPv4 address", "create", { ok: true, data: { ip: "not-an-ip" } }, /ip: /],
    ["a start whose address is a number", "start", { ok: true, data: { ip: 42 } }, /ip: /],
    [
      "a golden build that is not ready",
      "build_golden",
      { ok: true, data: { template: "minimal" } },
      /status: /,
    ],
    [
      "a failure without a code",
      "create",
      { ok: false, error: "disk full" },
      /code: .*the agent said: disk full/,
    ],
    ["a failure whose code is not a code", "stop", { ok: false, code: "Disk Full!", error: "x" }, /code: /],
  ] as const)("refuses %s", (_what, action, result, reason) => {
    const event = { seq: 1, at: at(0), type: "result", ...result } as JobEvent;
    const { state, applied, outcome } = applyJobEvents(action, fresh(), [event]);
    expect(applied).toHaveLength(1);
    expect(state).toMatchObject({ status: "failed", errorCode: "invalid_result", result: null });
    expect(state.error).toMatch(new RegExp(`^the agent's ${action} result does not match its contract`));
    expect(state.error).toMatch(reason);
    expect(outcome).toMatchObject({ ok: false, code: "invalid_result" });
  });
});
