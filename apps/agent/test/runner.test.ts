import { getEventListeners } from "node:events";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import type { BoxJobPayload } from "@doppio/contracts";
import { pino } from "pino";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { HandlerDeps, JobHandler } from "../src/jobs/registry.ts";
import { JobRunner } from "../src/jobs/runner.ts";
import { createMetrics } from "../src/metrics.ts";
import { type Db, openStore } from "../src/store/db.ts";
import { JobStore } from "../src/store/jobs.ts";

/** A handler whose runs the test opens and finishes by hand: order and overlap, no timing. */
class Gates {
  readonly started: string[] = [];
  /** `start:TAG` and `end:TAG`, in the order they happened. */
  readonly events: string[] = [];
  readonly #open = new Map<string, () => void>();
  readonly #waiting = new Map<string, () => void>();
  running = 0;
  maxRunning = 0;

  handler(): JobHandler<"start"> {
    return {
      run: async (_deps, p) => {
        const tag = p.env.TAG!;
        this.started.push(tag);
        this.events.push(`start:${tag}`);
        this.running++;
        this.maxRunning = Math.max(this.maxRunning, this.running);
        this.#waiting.get(tag)?.();
        await new Promise<void>((resolve) => this.#open.set(tag, resolve));
        this.running--;
        this.events.push(`end:${tag}`);
        return { ip: "10.0.0.2" };
      },
    };
  }

  /** Resolves once the job tagged `tag` is running. */
  whenStarted(tag: string): Promise<void> {
    if (this.started.includes(tag)) return Promise.resolve();
    return new Promise((resolve) => this.#waiting.set(tag, resolve));
  }

  finish(tag: string): void {
    const f = this.#open.get(tag);
    if (!f) throw new Error(`${tag} is not running`);
    f();
  }
}

describe("job runner: parallel across boxes, in order per box", () => {
  let dir: string;
  let db: Db;
  let store: JobStore;
  let gates: Gates;
  let runner: JobRunner;

  beforeEach(async () => {
    dir = await mkdtemp(path.join(tmpdir(), "doppio-runner-"));
    db = openStore(dir);
    store = new JobStore(db);
    gates = new Gates();
    runner = new JobRunner({
      store,
      registry: { start: gates.handler() },
      handlers: {} as HandlerDeps,
      clock: { now: () => new Date() },
      log: pino({ level: "silent" }),
      metrics: createMetrics(),
      concurrency: 2,
      onEvent: () => {},
    });
  });
  afterEach(async () => {
    await runner.idle();
    db.close();
    await rm(dir, { recursive: true, force: true });
  });

  const add = (id: string, box: string, tag = id) => {
    const payload: BoxJobPayload = {
      slug: box,
      template: "minimal",
      templateVersion: "1",
      vcpu: 1,
      memoryMb: 512,
      diskGb: 1,
      env: { TAG: tag },
      owner: "u",
      sitePublic: true,
      publicWake: false,
      repo: null,
      githubUrl: "https://github.com",
      gitAuthor: null,
    };
    store.insert({ id, action: "start", box, payload, receivedAt: "t" });
    runner.enqueue(store.get(id)!);
  };

  it("runs at most `concurrency` jobs at once, and one box's jobs strictly in arrival order", async () => {
    add("a1", "box-a");
    add("a2", "box-a");
    add("b1", "box-b");
    add("c1", "box-c");
    expect(runner.freeSlots()).toBe(0);
    await gates.whenStarted("a1");
    await gates.whenStarted("b1");
    expect([...gates.started].sort()).toEqual(["a1", "b1"]);

    gates.finish("a1");
    // a2 waits for a1 (same box); c1 was waiting for a slot. Either may take the free slot,
    // but a2 never starts before a1 finished, and never more than two run.
    await Promise.race([gates.whenStarted("a2"), gates.whenStarted("c1")]);
    gates.finish("b1");
    await gates.whenStarted("a2");
    await gates.whenStarted("c1");
    gates.finish("a2");
    gates.finish("c1");
    await runner.idle();

    expect(gates.maxRunning).toBe(2);
    // Same box: a2 starts only after a1 has ended, not merely after it started.
    expect(gates.events.indexOf("start:a2")).toBeGreaterThan(gates.events.indexOf("end:a1"));
    for (const id of ["a1", "a2", "b1", "c1"]) {
      expect(store.get(id)).toMatchObject({ status: "done", ok: true });
    }
    expect(runner.freeSlots()).toBe(2);
  });

  it("a job handed out twice runs once", async () => {
    add("x1", "box-x");
    runner.enqueue(store.get("x1")!);
    await gates.whenStarted("x1");
    gates.finish("x1");
    await runner.idle();
    expect(gates.started).toEqual(["x1"]);
    expect(store.events("x1").filter((e) => e.type === "result")).toHaveLength(1);
  });

  it("a wait for a free slot leaves no listener on the claim loop's signal once a slot frees", async () => {
    // The claim loop's signal lives as long as the agent; each time the slots were full it
    // waits on them with that signal.
    const loop = new AbortController();
    for (let i = 0; i < 15; i++) {
      add(`p${i}`, `box-p${i}`);
      add(`q${i}`, `box-q${i}`);
      const freed = runner.waitForSlot(loop.signal);
      await gates.whenStarted(`p${i}`);
      await gates.whenStarted(`q${i}`);
      gates.finish(`p${i}`);
      await freed;
      gates.finish(`q${i}`);
      await runner.idle();
    }
    expect(getEventListeners(loop.signal, "abort")).toHaveLength(0);
    // An abort still ends a wait while the slots are full.
    add("r1", "box-r1");
    add("r2", "box-r2");
    await gates.whenStarted("r2");
    const waiting = runner.waitForSlot(loop.signal);
    loop.abort();
    await waiting;
    gates.finish("r1");
    gates.finish("r2");
  });
});
