import { statfsSync } from "node:fs";
import { open } from "node:fs/promises";
import path from "node:path";
import type { JobEvent } from "@doppio/contracts";
import type { Db } from "./db.ts";

type LocalJobStatus = "queued" | "running" | "done";

/** Free bytes the store's filesystem needs before jobs run again after it was full. */
const ROOM_BYTES = 1024 * 1024;

export interface StoredJob {
  id: string;
  action: string;
  box: string | null;
  payload: unknown;
  status: LocalJobStatus;
  attempt: number;
  lastSeq: number;
  local: boolean;
  ok: boolean | null;
  error: string | null;
  receivedAt: string;
  finishedAt: string | null;
}

/** An event before the store gives it its sequence number. */
export type NewEvent = JobEvent extends infer E ? (E extends unknown ? Omit<E, "seq"> : never) : never;

export interface OutboxRow {
  jobId: string;
  seq: number;
  event: JobEvent;
}

interface JobRow {
  id: string;
  action: string;
  box: string | null;
  payload: string;
  status: LocalJobStatus;
  attempt: number;
  last_seq: number;
  local: number;
  ok: number | null;
  error: string | null;
  received_at: string;
  finished_at: string | null;
}

const toJob = (r: JobRow): StoredJob => ({
  id: r.id,
  action: r.action,
  box: r.box,
  payload: JSON.parse(r.payload) as unknown,
  status: r.status,
  attempt: r.attempt,
  lastSeq: r.last_seq,
  local: r.local === 1,
  ok: r.ok === null ? null : r.ok === 1,
  error: r.error,
  receivedAt: r.received_at,
  finishedAt: r.finished_at,
});

/**
 * The durable work queue and its outbox. A job is written here before it runs; every event
 * gets its per-job sequence number in the same transaction that stores it, so a crash can
 * never deliver a sequence twice with different content or skip one.
 */
export class JobStore {
  /** Events appended since the WAL was last synced to disk (see `append` and `sync`). */
  #unsynced = false;

  constructor(private readonly db: Db) {}

  /** Idempotent on id: a job the control plane hands out again is not queued twice. */
  insert(job: {
    id: string;
    action: string;
    box: string | null;
    payload: unknown;
    local?: boolean;
    receivedAt: string;
  }): boolean {
    const res = this.db
      .prepare(
        `INSERT INTO jobs (id, action, box, payload, status, local, received_at)
         VALUES (?, ?, ?, ?, 'queued', ?, ?) ON CONFLICT (id) DO NOTHING`,
      )
      .run(
        job.id,
        job.action,
        job.box,
        JSON.stringify(job.payload ?? null),
        job.local ? 1 : 0,
        job.receivedAt,
      );
    return res.changes === 1;
  }

  /**
   * A job the control plane handed out: stored and acknowledged (`started`, the first event)
   * in one transaction, so a failed write (full disk) leaves neither. A job stored without
   * its acknowledgement would be held (its lease extended by every heartbeat) yet never run.
   * Returns whether it was new.
   */
  receive(job: { id: string; action: string; box: string | null; payload: unknown }, at: string): boolean {
    return this.db.transaction(() => {
      const fresh = this.insert({ ...job, receivedAt: at });
      if (fresh) {
        this.#append(job.id, { type: "started", at });
        this.#unsynced = true;
      }
      return fresh;
    })();
  }

  get(id: string): StoredJob | null {
    const row = this.db.prepare("SELECT * FROM jobs WHERE id = ?").get(id) as JobRow | undefined;
    return row ? toJob(row) : null;
  }

  /** Jobs not yet finished, in the order they were received (rowid). */
  unfinished(): StoredJob[] {
    return (
      this.db.prepare("SELECT * FROM jobs WHERE status != 'done' ORDER BY rowid").all() as JobRow[]
    ).map(toJob);
  }

  /** Crash recovery: a job that was running when the agent died runs again from the start. */
  requeueRunning(): number {
    return this.db.prepare("UPDATE jobs SET status = 'queued' WHERE status = 'running'").run().changes;
  }

  markRunning(id: string): number {
    const row = this.db
      .prepare("UPDATE jobs SET status = 'running', attempt = attempt + 1 WHERE id = ? RETURNING attempt")
      .get(id) as { attempt: number } | undefined;
    return row?.attempt ?? 0;
  }

  /**
   * Stores one event with the next sequence number; returns it. Committed without an fsync
   * (`synchronous = NORMAL`: safe against a crash of this process, not yet against power
   * loss): a job's many step events would otherwise each wait for the disk on the agent's one
   * thread. `sync` makes them durable before any leaves this host, so the control plane never
   * holds an event this store could lose and number again.
   */
  append(jobId: string, event: NewEvent): number {
    this.db.pragma("synchronous = NORMAL");
    try {
      const seq = this.db.transaction(() => this.#append(jobId, event))();
      this.#unsynced = true;
      return seq;
    } finally {
      this.db.pragma("synchronous = FULL");
    }
  }

  /**
   * Whether the store's filesystem has room for jobs again after it was full: at least
   * ROOM_BYTES free (a claimed job, its events and a WAL checkpoint need far less) and a
   * write of the same size commits. The written row is removed in the same transaction, so
   * nothing is left behind, but its pages had to fit in the WAL.
   */
  hasRoom(): boolean {
    const fs = statfsSync(path.dirname(this.db.name));
    if (fs.bavail * fs.bsize < ROOM_BYTES) return false;
    this.db.transaction(() => {
      this.db.exec("CREATE TABLE IF NOT EXISTS room_probe (b BLOB)");
      this.db.prepare("INSERT INTO room_probe (b) VALUES (zeroblob(?))").run(ROOM_BYTES / 4);
      this.db.exec("DROP TABLE room_probe");
    })();
    return true;
  }

  /**
   * Makes every event committed so far durable: an fdatasync of the write-ahead log, where
   * SQLite has written them (a commit under `synchronous = FULL` does the same sync). It
   * runs on libuv's thread pool, so the agent's one thread does not wait for the disk
   * (a checkpoint did, and under a restore's disk load took up to 200 ms). Pages a
   * checkpoint already moved into the main file were synced by that checkpoint.
   */
  async sync(): Promise<void> {
    if (!this.#unsynced) return;
    // Events stored while the sync runs set it again: they are not covered by this one.
    this.#unsynced = false;
    try {
      const wal = await open(`${this.db.name}-wal`, "r+");
      try {
        await wal.datasync();
      } finally {
        await wal.close();
      }
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT") {
        this.#unsynced = true;
        throw err;
      }
      // No log file (never so in WAL mode with the store open): a checkpoint syncs what there is.
      this.db.pragma("wal_checkpoint(PASSIVE)");
    }
  }

  /** The final event and the job's `done` status land in one transaction: a result is written once. */
  finish(jobId: string, result: Omit<Extract<NewEvent, { type: "result" }>, "type" | "at">, at: string) {
    return this.db.transaction(() => {
      const job = this.db.prepare("SELECT status FROM jobs WHERE id = ?").get(jobId) as
        | { status: LocalJobStatus }
        | undefined;
      if (!job || job.status === "done") return null;
      const seq = this.#append(jobId, { type: "result", at, ...result });
      this.db
        .prepare("UPDATE jobs SET status = 'done', ok = ?, error = ?, finished_at = ? WHERE id = ?")
        .run(result.ok ? 1 : 0, result.error ?? null, at, jobId);
      return seq;
    })();
  }

  #append(jobId: string, event: NewEvent): number {
    const row = this.db
      .prepare("UPDATE jobs SET last_seq = last_seq + 1 WHERE id = ? RETURNING last_seq")
      .get(jobId) as { last_seq: number } | undefined;
    if (!row) throw new Error(`job ${jobId} is not in the store`);
    const full = { seq: row.last_seq, ...event } as JobEvent;
    this.db
      .prepare("INSERT INTO outbox (job_id, seq, event) VALUES (?, ?, ?)")
      .run(jobId, row.last_seq, JSON.stringify(full));
    return row.last_seq;
  }

  /** Undelivered events of control-plane jobs, oldest first, at most `perJob` per job. */
  pending(perJob: number): Map<string, OutboxRow[]> {
    const rows = this.db
      .prepare(
        `SELECT o.job_id, o.seq, o.event FROM outbox o JOIN jobs j ON j.id = o.job_id
         WHERE o.delivered = 0 AND j.local = 0 ORDER BY o.job_id, o.seq`,
      )
      .all() as Array<{ job_id: string; seq: number; event: string }>;
    const out = new Map<string, OutboxRow[]>();
    for (const r of rows) {
      const list = out.get(r.job_id) ?? [];
      if (list.length >= perJob) continue;
      list.push({ jobId: r.job_id, seq: r.seq, event: JSON.parse(r.event) as JobEvent });
      out.set(r.job_id, list);
    }
    return out;
  }

  markDelivered(jobId: string, upToSeq: number): number {
    return this.db
      .prepare("UPDATE outbox SET delivered = 1 WHERE job_id = ? AND seq <= ? AND delivered = 0")
      .run(jobId, upToSeq).changes;
  }

  /** Events the control plane will never take (job unknown there, or closed): kept, not resent. */
  markDead(jobId: string): number {
    return this.db.prepare("UPDATE outbox SET delivered = 2 WHERE job_id = ? AND delivered = 0").run(jobId)
      .changes;
  }

  /**
   * Forgets finished jobs (and their outbox rows) that finished before `cutoff` (ISO time)
   * and have nothing left to deliver: every event reached the control plane or was set
   * aside, or the job never leaves the host. The control plane never hands a finished job
   * out again, so the id is not needed to keep `insert` idempotent. Returns the jobs removed.
   */
  prune(cutoff: string): number {
    const done = `status = 'done' AND finished_at < @cutoff AND (local = 1 OR NOT EXISTS
      (SELECT 1 FROM outbox o WHERE o.job_id = jobs.id AND o.delivered = 0))`;
    return this.db.transaction(() => {
      this.db
        .prepare(`DELETE FROM outbox WHERE job_id IN (SELECT id FROM jobs WHERE ${done})`)
        .run({ cutoff });
      return this.db.prepare(`DELETE FROM jobs WHERE ${done}`).run({ cutoff }).changes;
    })();
  }

  backlog(): number {
    const row = this.db
      .prepare(
        "SELECT count(*) AS n FROM outbox o JOIN jobs j ON j.id = o.job_id WHERE o.delivered = 0 AND j.local = 0",
      )
      .get() as { n: number };
    return row.n;
  }

  events(jobId: string): Array<JobEvent & { delivered: number }> {
    return (
      this.db
        .prepare("SELECT event, delivered FROM outbox WHERE job_id = ? ORDER BY seq")
        .all(jobId) as Array<{
        event: string;
        delivered: number;
      }>
    ).map((r) => ({ ...(JSON.parse(r.event) as JobEvent), delivered: r.delivered }));
  }

  /** Ids of control-plane jobs held here (queued or running): the heartbeat extends their leases. */
  heldIds(): string[] {
    return (
      this.db
        .prepare("SELECT id FROM jobs WHERE status != 'done' AND local = 0 ORDER BY rowid")
        .all() as Array<{
        id: string;
      }>
    ).map((r) => r.id);
  }

  recent(limit: number, filter: { action?: string } = {}): StoredJob[] {
    const sql = filter.action
      ? "SELECT * FROM jobs WHERE action = ? ORDER BY rowid DESC LIMIT ?"
      : "SELECT * FROM jobs ORDER BY rowid DESC LIMIT ?";
    const args = filter.action ? [filter.action, limit] : [limit];
    return (this.db.prepare(sql).all(...args) as JobRow[]).map(toJob);
  }
}
