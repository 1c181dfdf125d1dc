import { sql } from "drizzle-orm";
import { PgDialect } from "drizzle-orm/pg-core";
import type pg from "pg";
import type { Logger } from "pino";
import { z } from "zod";
import type { Db } from "./client.ts";

/** First half of every advisory-lock key this control plane takes ("dop"), so other users of the database do not collide. */
const LOCK_CLASS = 0x646f70;

/**
 * A decision taken one at a time across replicas, named for its advisory lock: a user's box
 * quota counts that user's boxes, so the user's own creates count in turn (`owner:<user
 * id>`); a server's free room is counted by one create at a time (`server:<server id>`).
 * A create takes its owner's lock first and then at most one server's, and waits for a
 * server's lock only when it holds none (`firstFree`), so creates never deadlock.
 * Advisory locks, not row locks on the servers: heartbeats update those rows and must not
 * queue behind every create.
 */
export type Decision = `owner:${string}` | `server:${string}`;

const lockKey = (name: string) => sql`${LOCK_CLASS}, hashtext(${name})`;

/** Holds the lock of `decision` until `tx` ends, waiting for it if another transaction holds it. */
export async function serializeIn(tx: Db, decision: Decision): Promise<void> {
  await tx.execute(sql`select pg_advisory_xact_lock(${lockKey(decision)})`);
}

/** node-postgres's answer to `firstFree`'s query. */
const FirstFreeAnswer = z.object({ rows: z.array(z.object({ n: z.coerce.number() })) });

/**
 * Takes, until `tx` ends, the lock of the first of `decisions` no other transaction holds,
 * without waiting, in one round trip (CASE tries them in order and stops at the first it
 * gets), and returns its index; -1 when every one is held.
 */
export async function firstFree(tx: Db, decisions: readonly Decision[]): Promise<number> {
  if (decisions.length === 0) return -1;
  const tries = decisions.map((d, i) => sql`when pg_try_advisory_xact_lock(${lockKey(d)}) then ${i}`);
  const answer = FirstFreeAnswer.parse(
    await tx.execute(sql`select case ${sql.join(tries, sql` `)} else -1 end as n`),
  );
  return answer.rows[0]?.n ?? -1;
}

/** Work that must run on one replica at a time, named for its advisory lock. */
type ExclusiveTask = "lease-reaper" | "server-liveness" | "idle-sweep" | "billing";

type ExclusiveResult<T> = { ran: true; value: T } | { ran: false };

/** Work that must run on one replica at a time (the lease reaper, billing), each task by name. */
export interface ExclusiveTasks {
  /**
   * Runs `fn` unless the same task is running right now, on this replica or another; then
   * returns `{ran: false}` at once (periodic work simply waits for its next tick).
   */
  run<T>(task: ExclusiveTask, fn: () => Promise<T>): Promise<ExclusiveResult<T>>;
  close(): Promise<void>;
}

/**
 * Refuses a task already running in this process (a tick that outlasts its interval), so
 * the next one passes instead of running beside it.
 */
function onceHere() {
  const running = new Set<ExclusiveTask>();
  return async <T>(
    task: ExclusiveTask,
    fn: () => Promise<ExclusiveResult<T>>,
  ): Promise<ExclusiveResult<T>> => {
    if (running.has(task)) return { ran: false };
    running.add(task);
    try {
      return await fn();
    } finally {
      running.delete(task);
    }
  };
}

/** Tasks of a single process (PGlite is one by construction). */
export function processTasks(): ExclusiveTasks {
  const guard = onceHere();
  return {
    run: (task, fn) => guard(task, async () => ({ ran: true, value: await fn() })),
    close: async () => {},
  };
}

/** Renders the lock queries (with lockKey) for the lock connection, which is not Drizzle's. */
const dialect = new PgDialect();

/** node-postgres's answer to the lock query. */
const LockAnswer = z.object({ rows: z.array(z.object({ ok: z.boolean() })) });

/**
 * Tasks of replicas on one PostgreSQL: a task runs under a session advisory lock, taken on
 * one connection of its own outside the pool, so a task holding its lock never waits for a
 * pooled connection that other tasks holding theirs have taken (with the lock on a pooled
 * connection, two tasks on a pool of two each held one and waited for a second until the
 * connect timeout). That connection only takes and drops locks. If it is lost (a restart),
 * its locks go with it and the next run connects again; another replica may then start a
 * task this one is still finishing, as it could when a replica dies mid-run, so every task
 * is safe to run twice. On one connection a session lock is re-entrant, so a task already
 * running in this process is refused before asking PostgreSQL.
 */
export function advisoryTasks(newClient: () => pg.Client, log: Pick<Logger, "warn">): ExclusiveTasks {
  const guard = onceHere();
  let current: { client: pg.Client; ready: Promise<pg.Client> } | null = null;
  const discard = (client: pg.Client) => {
    if (current?.client === client) current = null;
  };
  const lockClient = (): Promise<pg.Client> => {
    if (current) return current.ready;
    const client = newClient();
    const ready = client.connect().then(() => client);
    current = { client, ready };
    client.on("error", (err) => {
      log.warn({ err }, "the task-lock database connection was closed");
      discard(client);
    });
    client.on("end", () => discard(client));
    ready.catch(() => discard(client));
    return ready;
  };
  const lockQuery = async (
    client: pg.Client,
    fn: "pg_try_advisory_lock" | "pg_advisory_unlock",
    task: ExclusiveTask,
  ): Promise<boolean> => {
    const query =
      fn === "pg_try_advisory_lock"
        ? sql`select pg_try_advisory_lock(${lockKey(task)}) as ok`
        : sql`select pg_advisory_unlock(${lockKey(task)}) as ok`;
    try {
      const { sql: text, params } = dialect.sqlToQuery(query);
      return LockAnswer.parse(await client.query(text, params)).rows[0]?.ok === true;
    } catch (err) {
      // A connection that failed a query (its timeout, a reset) is not trusted with locks
      // again: ending it drops whatever it holds, and the next run connects anew.
      discard(client);
      client.end().catch(() => {});
      throw err;
    }
  };
  return {
    run: <T>(task: ExclusiveTask, fn: () => Promise<T>) =>
      guard(task, async (): Promise<ExclusiveResult<T>> => {
        const client = await lockClient();
        if (!(await lockQuery(client, "pg_try_advisory_lock", task))) return { ran: false };
        try {
          return { ran: true, value: await fn() };
        } finally {
          // A lost connection already dropped the lock.
          await lockQuery(client, "pg_advisory_unlock", task).catch(() => false);
        }
      }),
    async close() {
      const closing = current;
      current = null;
      await closing?.ready.then((client) => client.end()).catch(() => {});
    },
  };
}
