import { EventEmitter } from "node:events";
import type { AnsiblePlay, AnsibleTask, Box, Job, LogLine, TopUp, WalletEvent } from "@doppio/contracts";

/** A change of an Ansible play: the play itself (status, counters, progress) or one of its tasks. */
export type PlayEvent = { type: "play"; play: AnsiblePlay } | { type: "task"; task: AnsibleTask };

export type RealtimeEvent =
  | { type: "box"; box: Box }
  | { type: "job"; job: Job & { boxSlug: string | null } }
  | { type: "wallet"; wallet: WalletEvent }
  /** A card top-up changed status; streams send it to `userId` alone (billing/stripe.ts). */
  | { type: "topup"; userId: string; topUp: TopUp };

/**
 * In-process fan-out of state changes: `server:<id>` wakes that server's claim long-polls,
 * `team:<id>` feeds the realtime stream of that team's members, `logs:<box id>` the followers
 * of that box's log, `play:<id>` the followers of an Ansible play. This one reaches the
 * subscribers of its own process only, which is all there is on PGlite; on PostgreSQL
 * `PgBus` (./pg-bus.ts) extends it across replicas.
 */
export class Bus {
  protected readonly emitter = new EventEmitter();

  constructor() {
    this.emitter.setMaxListeners(0);
  }

  jobEnqueued(serverId: string): void {
    this.emitter.emit(`server:${serverId}`);
  }

  /**
   * Subscribes to the server's enqueue notifications BEFORE the caller looks for work, so
   * a job enqueued between "found nothing" and "start waiting" still wakes the waiter.
   */
  watchJobs(serverId: string): { wait(ms: number, signal: AbortSignal): Promise<void>; close(): void } {
    const topic = `server:${serverId}`;
    let pending = false;
    let wake: (() => void) | null = null;
    const onJob = () => {
      pending = true;
      wake?.();
    };
    this.emitter.on(topic, onJob);
    return {
      wait: (ms, signal) =>
        new Promise<void>((resolve) => {
          if (pending || signal.aborted) {
            pending = false;
            return resolve();
          }
          const done = () => {
            clearTimeout(timer);
            signal.removeEventListener("abort", done);
            wake = null;
            pending = false;
            resolve();
          };
          const timer = setTimeout(done, ms);
          wake = done;
          signal.addEventListener("abort", done, { once: true });
        }),
      close: () => this.emitter.off(topic, onJob),
    };
  }

  publish(teamId: string, event: RealtimeEvent): void {
    this.emitter.emit(`team:${teamId}`, event);
    if (event.type === "box") this.emitter.emit("box", teamId, event.box.slug);
  }

  /** Every box change on any team (billing settles the box's usage at each one). */
  onBoxChange(listener: (teamId: string, slug: string) => void): () => void {
    this.emitter.on("box", listener);
    return () => this.emitter.off("box", listener);
  }

  subscribe(teamId: string, listener: (event: RealtimeEvent) => void): () => void {
    const topic = `team:${teamId}`;
    this.emitter.on(topic, listener);
    return () => this.emitter.off(topic, listener);
  }

  /** Whether anyone in this process listens on `topic` (`server:…`, `team:…`, `logs:…`, `play:…`). */
  protected listened(topic: string): boolean {
    return this.emitter.listenerCount(topic) > 0;
  }

  /** Connects whatever carries the topics beyond this process (nothing here). */
  async start(): Promise<void> {}

  async close(): Promise<void> {}

  publishLogs(boxId: string, lines: LogLine[]): void {
    this.emitter.emit(`logs:${boxId}`, lines);
  }

  subscribeLogs(boxId: string, listener: (lines: LogLine[]) => void): () => void {
    const topic = `logs:${boxId}`;
    this.emitter.on(topic, listener);
    return () => this.emitter.off(topic, listener);
  }

  publishPlay(playId: string, event: PlayEvent): void {
    this.emitter.emit(`play:${playId}`, event);
  }

  subscribePlay(playId: string, listener: (event: PlayEvent) => void): () => void {
    const topic = `play:${playId}`;
    this.emitter.on(topic, listener);
    return () => this.emitter.off(topic, listener);
  }
}
