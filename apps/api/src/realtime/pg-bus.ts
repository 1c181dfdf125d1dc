import { type LogLine, TopUp, WalletEvent } from "@doppio/contracts";
import { sql } from "drizzle-orm";
import pg from "pg";
import type { Logger } from "pino";
import { z } from "zod";
import type { Db } from "../db/client.ts";
import { Bus, type PlayEvent, type RealtimeEvent } from "./bus.ts";
import type { BusReader } from "./reload.ts";

/** The one channel every replica LISTENs on. */
const BUS_CHANNEL = "doppio_bus";

/**
 * What crosses replicas: a topic and an id, never the row (NOTIFY payloads are capped at
 * 8000 bytes and a row read later is never stale). `r` is the sending replica, which
 * already told its own subscribers. Box and job notes are sent by the database, in the
 * transaction that changes the row (drizzle/0024_bus_notes.sql): they arrive if and only if
 * the change commits, even when the replica that made it dies right after. The others are
 * sent from here after the fact, and a replica dying first loses them: a claim wake-up (the
 * agent's long-poll ends on its own and claims again), log lines (a follower reconnecting
 * reads them), a wallet warning, a top-up's status, a play's progress.
 */
const Note = z.discriminatedUnion("k", [
  z.object({ r: z.string(), k: z.literal("server"), id: z.string() }),
  z.object({ r: z.string(), k: z.literal("box"), team: z.string(), id: z.string() }),
  z.object({ r: z.string(), k: z.literal("job"), team: z.string(), id: z.string() }),
  z.object({ r: z.string(), k: z.literal("logs"), id: z.string(), from: z.number(), to: z.number() }),
  // A wallet warning is a moment, not a row: its few fields travel in the notification.
  z.object({ r: z.string(), k: z.literal("wallet"), team: z.string(), wallet: WalletEvent }),
  // So is a top-up's new status (a few short fields).
  z.object({ r: z.string(), k: z.literal("topup"), team: z.string(), user: z.string(), topUp: TopUp }),
  // An Ansible play (status, counters) or one of its tasks changed.
  z.object({ r: z.string(), k: z.literal("play"), id: z.string() }),
  z.object({ r: z.string(), k: z.literal("task"), play: z.string(), id: z.string() }),
]);
type Note = z.infer<typeof Note>;

/** How far before the last sign of life a catch-up read starts (clocks of replicas differ a little). */
const CATCH_UP_MARGIN_MS = 30_000;
const PING_MS = 5_000;
const RECONNECT_MAX_MS = 5_000;

export interface PgBusOptions {
  connectionString: string;
  /** This process's name on the database (Database.applicationName), which signs its notes. */
  replica: string;
  db: Db;
  reader: BusReader;
  log: Logger;
  /** First delay before reconnecting a lost listener (doubles up to 5 s). */
  reconnectMs: number;
}

/**
 * The bus across control-plane replicas on one PostgreSQL: each publish tells this
 * process's subscribers at once (as `Bus` does) and the others hear of it on one channel
 * (a box's or a job's change from the database at commit, the rest NOTIFYed from here),
 * load the row and tell theirs. One dedicated connection LISTENs; when it is lost (backend killed,
 * server restarted, network cut, found by a ping) it reconnects with backoff and, once
 * listening again, catches up from the database: every claim waiter re-claims, every
 * followed team gets the boxes and jobs that changed since shortly before the loss, every
 * followed log the lines after the last one this replica saw, and every followed play its
 * tasks and itself as they are now. Streams drop what
 * their clients already have (log lines by seq); box and job events are whole states, so
 * a repeat is harmless.
 */
export class PgBus extends Bus {
  private client: pg.Client | null = null;
  private pid: number | null = null;
  private connected = false;
  private hadConnection = false;
  private closed = false;
  private lastAliveAt = Date.now();
  private reconnectTimer: NodeJS.Timeout | undefined;
  private pingTimer: NodeJS.Timeout | undefined;
  private delay: number;
  private reconnects = 0;
  /** Per topic, the reload in progress: events of one topic reach subscribers in order. */
  private readonly chains = new Map<string, Promise<void>>();
  /** Notes published here and not yet sent, and the send in progress. */
  private readonly outbox: string[] = [];
  private sending: Promise<void> | null = null;
  /** Newest log seq this replica has passed on, per box: where a catch-up resumes. */
  private readonly logSeen = new Map<string, number>();

  constructor(private readonly opts: PgBusOptions) {
    super();
    this.delay = opts.reconnectMs;
  }

  override async start(): Promise<void> {
    await this.connect();
    this.pingTimer = setInterval(() => this.ping(), PING_MS);
    this.pingTimer.unref();
  }

  override async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.pingTimer);
    clearTimeout(this.reconnectTimer);
    const client = this.client;
    this.client = null;
    await client?.end().catch(() => {});
    await this.sending;
    await Promise.allSettled([...this.chains.values()]);
  }

  /** For tests and health: the LISTEN backend's pid and how often it was replaced. */
  listenerState(): { connected: boolean; pid: number | null; reconnects: number } {
    return { connected: this.connected, pid: this.pid, reconnects: this.reconnects };
  }

  override jobEnqueued(serverId: string): void {
    super.jobEnqueued(serverId);
    this.notify({ r: this.opts.replica, k: "server", id: serverId });
  }

  override publish(teamId: string, event: RealtimeEvent): void {
    super.publish(teamId, event);
    // The database announced the row's change already, at commit.
    if (event.type === "box" || event.type === "job") return;
    if (event.type === "topup") {
      this.notify({ r: this.opts.replica, k: "topup", team: teamId, user: event.userId, topUp: event.topUp });
    } else {
      this.notify({ r: this.opts.replica, k: "wallet", team: teamId, wallet: event.wallet });
    }
  }

  override publishLogs(boxId: string, lines: LogLine[]): void {
    if (lines.length === 0) return;
    super.publishLogs(boxId, lines);
    this.sawLogs(boxId, lines);
    this.notify({ r: this.opts.replica, k: "logs", id: boxId, from: lines[0]!.seq, to: lines.at(-1)!.seq });
  }

  override publishPlay(playId: string, event: PlayEvent): void {
    super.publishPlay(playId, event);
    this.notify(
      event.type === "play"
        ? { r: this.opts.replica, k: "play", id: playId }
        : { r: this.opts.replica, k: "task", play: playId, id: event.task.id },
    );
  }

  /**
   * Queues a note; one statement at a time sends every note queued so far, in order (each
   * its own notification). Under load that is one round trip for many publishes, not one
   * each, and other replicas receive the notes in the order they were published here.
   * PostgreSQL delivers identical notes sent in one statement once, which loses nothing:
   * a note names a row to reload or a host to wake, and once is enough for either.
   */
  private notify(note: Note): void {
    this.outbox.push(JSON.stringify(note));
    if (!this.sending) this.sending = this.send();
  }

  private async send(): Promise<void> {
    while (this.outbox.length > 0) {
      const batch = this.outbox.splice(0);
      await this.opts.db
        .execute(
          sql`select pg_notify(${BUS_CHANNEL}, note) from json_array_elements_text(${JSON.stringify(batch)}::json) as note`,
        )
        .catch((err) => this.opts.log.error({ err, notes: batch.length }, "bus notify failed"));
    }
    this.sending = null;
  }

  private sawLogs(boxId: string, lines: LogLine[]): void {
    const last = lines.at(-1)?.seq;
    if (last !== undefined && last > (this.logSeen.get(boxId) ?? 0)) this.logSeen.set(boxId, last);
  }

  private receive(payload: string): void {
    this.lastAliveAt = Date.now();
    let note: Note;
    try {
      note = Note.parse(JSON.parse(payload));
    } catch (err) {
      this.opts.log.warn({ err }, "ignoring a malformed bus notification");
      return;
    }
    if (note.r === this.opts.replica) return;
    const { reader } = this.opts;
    switch (note.k) {
      case "server":
        this.emitter.emit(`server:${note.id}`);
        return;
      case "box":
        this.reload(`team:${note.team}`, () => reader.box(note.id));
        return;
      case "job":
        this.reload(`team:${note.team}`, () => reader.job(note.id));
        return;
      case "logs":
        this.reloadLogs(note.id, () => reader.logs(note.id, note.from - 1, note.to));
        return;
      case "wallet":
        this.reload(`team:${note.team}`, async () => ({ type: "wallet", wallet: note.wallet }));
        return;
      case "topup":
        this.reload(`team:${note.team}`, async () => ({
          type: "topup",
          userId: note.user,
          topUp: note.topUp,
        }));
        return;
      case "play":
        this.reload(`play:${note.id}`, () => reader.play(note.id));
        return;
      case "task":
        this.reload(`play:${note.play}`, () => reader.task(note.play, note.id));
        return;
    }
  }

  /** Loads a row for a topic someone here listens on and passes it on, in order per topic. */
  private reload(topic: string, load: () => Promise<RealtimeEvent | PlayEvent | null>): void {
    if (!this.listened(topic)) return;
    this.chain(topic, async () => {
      const event = await load();
      if (event) this.emitter.emit(topic, event);
    });
  }

  private reloadLogs(boxId: string, load: () => Promise<LogLine[]>): void {
    const topic = `logs:${boxId}`;
    if (!this.listened(topic)) return;
    this.chain(topic, async () => {
      const lines = await load();
      if (lines.length === 0) return;
      this.sawLogs(boxId, lines);
      this.emitter.emit(topic, lines);
    });
  }

  private chain(topic: string, step: () => Promise<void>): void {
    const next = (this.chains.get(topic) ?? Promise.resolve())
      .then(step)
      .catch((err) => this.opts.log.error({ err, topic }, "bus reload failed"))
      .finally(() => {
        if (this.chains.get(topic) === next) this.chains.delete(topic);
      });
    this.chains.set(topic, next);
  }

  private async connect(): Promise<void> {
    const client = new pg.Client({
      connectionString: this.opts.connectionString,
      keepAlive: true,
      query_timeout: PING_MS * 2,
    });
    this.client = client;
    client.on("error", (err) => this.lost(client, err));
    client.on("end", () => this.lost(client));
    client.on("notification", (msg) => {
      if (msg.channel === BUS_CHANNEL && msg.payload) this.receive(msg.payload);
    });
    await client.connect();
    await client.query(`LISTEN ${BUS_CHANNEL}`);
    const { rows } = await client.query<{ pid: number }>("select pg_backend_pid() as pid");
    this.pid = rows[0]!.pid;
    const since = new Date(this.lastAliveAt - CATCH_UP_MARGIN_MS);
    this.connected = true;
    this.delay = this.opts.reconnectMs;
    if (this.hadConnection) {
      this.reconnects++;
      this.opts.log.info({ pid: this.pid, since }, "bus listener back; catching up");
      this.catchUp(since);
    }
    this.hadConnection = true;
    this.lastAliveAt = Date.now();
  }

  private lost(client: pg.Client, err?: Error): void {
    if (client !== this.client || this.closed) return;
    this.client = null;
    this.connected = false;
    this.opts.log.warn({ err, pid: this.pid }, "bus listener lost; reconnecting");
    client.removeAllListeners("notification");
    client.on("error", () => {}); // the dead connection may still report; it is already replaced
    client.end().catch(() => {});
    this.scheduleReconnect();
  }

  private scheduleReconnect(): void {
    if (this.closed || this.reconnectTimer) return;
    this.reconnectTimer = setTimeout(async () => {
      this.reconnectTimer = undefined;
      const attempt = this.client;
      try {
        if (!attempt) await this.connect();
      } catch (err) {
        this.opts.log.warn({ err, delayMs: this.delay }, "bus listener reconnect failed");
        this.delay = Math.min(this.delay * 2, RECONNECT_MAX_MS);
        const failed = this.client;
        if (failed) this.lost(failed, err instanceof Error ? err : undefined);
        else this.scheduleReconnect();
      }
    }, this.delay);
    this.reconnectTimer.unref();
  }

  /** A dead peer without a FIN (a cut network) shows up here: the ping times out. */
  private ping(): void {
    const client = this.client;
    if (!client || !this.connected) return;
    client.query("select 1").then(
      () => {
        this.lastAliveAt = Date.now();
      },
      (err) => this.lost(client, err),
    );
  }

  /** After a gap in listening: re-read everything someone here follows (see the class comment). */
  private catchUp(since: Date): void {
    const { reader } = this.opts;
    for (const name of this.emitter.eventNames()) {
      if (typeof name !== "string" || !this.listened(name)) continue;
      const [kind, id] = [name.slice(0, name.indexOf(":")), name.slice(name.indexOf(":") + 1)];
      if (kind === "server") this.emitter.emit(name);
      else if (kind === "team") {
        this.chain(name, async () => {
          for (const event of await reader.teamSince(id, since)) this.emitter.emit(name, event);
        });
      } else if (kind === "logs") {
        this.reloadLogs(id, () => reader.logs(id, this.logSeen.get(id) ?? 0));
      } else if (kind === "play") {
        this.chain(name, async () => {
          for (const event of await reader.playAll(id)) this.emitter.emit(name, event);
        });
      }
    }
    for (const boxId of this.logSeen.keys()) {
      if (!this.listened(`logs:${boxId}`)) this.logSeen.delete(boxId);
    }
  }
}
