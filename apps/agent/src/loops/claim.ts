import type { Logger } from "pino";
import { backoffMs, type Clock, sleep } from "../clock.ts";
import { type ControlPlane, retryAfterMs } from "../control-plane.ts";
import { type JobRunner, noSpaceLeft } from "../jobs/runner.ts";
import type { JobStore } from "../store/jobs.ts";
import { BackgroundLoop } from "./background-loop.ts";

/**
 * Long-polls for jobs while there are free slots. Each claimed job is written to SQLite
 * before anything runs (idempotent on id, so a job handed out twice runs once), acknowledged
 * with a `started` event through the outbox, then queued.
 */
export class ClaimLoop extends BackgroundLoop {
  constructor(
    private readonly d: {
      cp: ControlPlane;
      store: JobStore;
      runner: JobRunner;
      clock: Clock;
      log: Logger;
      waitMs: number;
      /** Wakes the deliverer after acknowledgements are stored. */
      onAck?: () => void;
    },
  ) {
    super();
  }

  /** One claim; returns how many new jobs were queued. */
  async claimOnce(waitMs: number, signal?: AbortSignal): Promise<number> {
    const max = this.d.runner.freeSlots();
    if (max === 0) return 0;
    const { jobs, rejected } = await this.d.cp.claim(max, waitMs, signal);
    for (const r of rejected) this.d.log.error({ job: r }, "claimed job is unreadable (no id); ignored");
    let queued = 0;
    if (jobs.length > 0) this.d.onAck?.();
    for (const j of jobs) {
      let fresh: boolean;
      try {
        // Acknowledge at once (the control plane's delivery lease ends with the first event),
        // even if the job now waits behind other work.
        fresh = this.d.store.receive(
          { id: j.id, action: j.action, box: j.box, payload: j.payload },
          this.d.clock.now().toISOString(),
        );
      } catch (err) {
        // The disk is full: the jobs not stored go back to the control plane when their
        // delivery lease ends (unacknowledged), and no more are claimed until there is room.
        if (noSpaceLeft(err)) this.d.runner.noteStoreFull();
        throw err;
      }
      const stored = this.d.store.get(j.id)!;
      if (!fresh) this.d.log.info({ job: j.id, status: stored.status }, "job handed out again; already held");
      if (stored.status !== "done") {
        this.d.runner.enqueue(stored);
        queued++;
      }
    }
    return queued;
  }

  protected async run(signal: AbortSignal): Promise<void> {
    let failures = 0;
    while (!signal.aborted) {
      await this.d.runner.waitForSlot(signal);
      if (signal.aborted) break;
      try {
        await this.claimOnce(this.d.waitMs, signal);
        failures = 0;
      } catch (err) {
        if (signal.aborted) break;
        failures++;
        this.d.log[failures === 1 ? "warn" : "debug"]({ err, failures }, "claim failed");
        await sleep(Math.max(backoffMs(failures), retryAfterMs(err)), signal);
      }
    }
  }
}
