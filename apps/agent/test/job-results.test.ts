import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import type { JobEvent } from "@doppio/contracts";
import { pino } from "pino";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { AgentError } from "../src/errors.ts";
import { ImageError } from "../src/images/errors.ts";
import type { HandlerDeps, Registry } from "../src/jobs/registry.ts";
import { JobRunner } from "../src/jobs/runner.ts";
import { createMetrics } from "../src/metrics.ts";
import { type Db, openStore } from "../src/store/db.ts";
import { JobStore } from "../src/store/jobs.ts";
import { QemuError } from "../src/vmm/qemu/errors.ts";
import { boxPayload } from "./support/agent-harness.ts";

/**
 * What a job's result event carries into the outbox, from handlers that succeed, fail
 * with a coded error, or return a result that breaks its action's contract.
 */
describe("job results at the agent: typed, coded, checked before the outbox", () => {
  let dir: string;
  let db: Db;
  let store: JobStore;

  beforeEach(async () => {
    dir = await mkdtemp(path.join(tmpdir(), "doppio-results-"));
    db = openStore(dir);
    store = new JobStore(db);
  });
  afterEach(async () => {
    db.close();
    await rm(dir, { recursive: true, force: true });
  });

  /** Runs one job of `slug` (a `start` unless told) through a runner with `registry`; returns its result event. */
  async function resultOf(
    registry: Registry,
    slug: string,
    job: { action?: string; payload?: unknown } = {},
  ) {
    const runner = new JobRunner({
      store,
      registry,
      handlers: {} as HandlerDeps,
      clock: { now: () => new Date() },
      log: pino({ level: "silent" }),
      metrics: createMetrics(),
      concurrency: 1,
      onEvent: () => {},
    });
    const { action = "start", payload: p = boxPayload(slug) } = job;
    store.insert({ id: `job-${slug}`, action, box: slug, payload: p, receivedAt: "t" });
    runner.enqueue(store.get(`job-${slug}`)!);
    await runner.idle();
    const results = store.events(`job-${slug}`).filter((e) => e.type === "result");
    expect(results).toHaveLength(1);
    const {
      seq: _seq,
      at: _at,
      delivered: _delivered,
      ...result
    } = results[0] as Extract<JobEvent, { type: "result" }> & { delivered: number };
    return result;
  }

  it("puts a success into the outbox as the action's typed result", async () => {
    const result = await resultOf({ start: { run: async () => ({ ip: "10.0.0.7" }) } }, "fine");
    expect(result).toEqual({ type: "result", ok: true, data: { ip: "10.0.0.7" } });
    expect(store.get("job-fine")).toMatchObject({ status: "done", ok: true });
  });

  it("refuses a result that breaks its contract: the job fails with invalid_result, nothing is settled", async () => {
    // A handler bug the types would catch, made at run time: an address that is not one.
    const broken: Registry = { start: { run: async () => ({ ip: 42 }) as unknown as { ip: string } } };
    const result = await resultOf(broken, "broken");
    expect(result).toMatchObject({ type: "result", ok: false, code: "invalid_result" });
    expect(result).not.toHaveProperty("data");
    expect(result.error).toMatch(
      /^the start handler returned a result that breaks its contract \(data\.ip: /,
    );
    expect(store.get("job-broken")).toMatchObject({ ok: false });
  });

  it.each([
    [
      "an image builder's refusal",
      new ImageError("toolchain_unsupported", "frappe 14 needs Python < 3.11"),
      "toolchain_unsupported",
    ],
    ["a QEMU failure", new QemuError("guest_not_ready", "the guest never reported ready"), "guest_not_ready"],
    [
      "an agent failure",
      new AgentError("box_not_on_host", 'box "x" does not exist on this host'),
      "box_not_on_host",
    ],
    ["a Node system error", Object.assign(new Error("ENOENT: no such file"), { code: "ENOENT" }), "internal"],
    ["an error without a code", new TypeError("undefined is not a function"), "internal"],
  ])("fails with the code of %s", async (_what, err, code) => {
    const result = await resultOf({ start: { run: async () => Promise.reject(err) } }, "failing");
    expect(result).toEqual({ type: "result", ok: false, code, error: err.message });
  });

  it("fails an unknown action and a malformed payload with their own codes", async () => {
    const ok: Registry = { start: { run: async () => ({ ip: "10.0.0.7" }) } };
    expect(await resultOf(ok, "odd", { action: "explode" })).toMatchObject({
      ok: false,
      code: "unknown_action",
    });
    const result = await resultOf(ok, "bad", { payload: { slug: "bad" } });
    expect(result).toMatchObject({ ok: false, code: "invalid_payload" });
  });
});
