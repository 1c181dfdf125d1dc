import { EventEmitter } from "node:events";
import type { Box, Job } from "@doppio/contracts";

export type RealtimeEvent =
  | { type: "box"; box: Box }
  | { type: "job"; job: Job & { boxSlug: string | null } };

/**
 * In-process fan-out of state changes: `server:<id>` wakes that server's claim long-polls,
 * `team:<id>` feeds the realtime stream of that team's members. One replica only; several
 * replicas would carry the same topics over Postgres LISTEN/NOTIFY.
 */
export class Bus {
  private readonly emitter = new EventEmitter();

  constructor() {
    this.emitter.setMaxListeners(0);
  }

  jobEnqueued(serverId: string): void {
    this.emitter.emit(`server:${serverId}`);
  }

  /** Resolves when a job is enqueued for the server, after `ms`, or when `signal` aborts. */
  waitForJob(serverId: string, ms: number, signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const topic = `server:${serverId}`;
      const done = () => {
        clearTimeout(timer);
        this.emitter.off(topic, done);
        signal.removeEventListener("abort", done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.emitter.on(topic, done);
      signal.addEventListener("abort", done, { once: true });
    });
  }

  publish(teamId: string, event: RealtimeEvent): void {
    this.emitter.emit(`team:${teamId}`, event);
  }

  subscribe(teamId: string, listener: (event: RealtimeEvent) => void): () => void {
    const topic = `team:${teamId}`;
    this.emitter.on(topic, listener);
    return () => this.emitter.off(topic, listener);
  }
}
