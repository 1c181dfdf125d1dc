import { sql } from "drizzle-orm";
import { z } from "zod";
import type { Db } from "./client.ts";

/** node-postgres's answer to the lock query. */
const LockAnswer = z.object({ rows: z.array(z.object({ ok: z.boolean() })) });

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
export type ExclusiveTask = "lease-reaper" | "server-liveness" | "idle-sweep" | "billing";

export type ExclusiveResult<T> = { ran: true; value: T } | { ran: false };

/**
 * Runs `fn` unless another replica is running the same task right now (then returns
 * `{ran: false}` at once: periodic work simply waits for its next tick). On PostgreSQL the
 * guard is a transaction-scoped advisory lock held by one pooled connection for as long as
 * `fn` runs (`fn` uses other connections); a replica that dies mid-run drops its connection
 * and with it the lock. PGlite is one process by construction, so there is nothing to guard.
 */
export async function exclusively<T>(
  db: Db,
  kind: "pglite" | "postgres",
  task: ExclusiveTask,
  fn: () => Promise<T>,
): Promise<ExclusiveResult<T>> {
  if (kind === "pglite") return { ran: true, value: await fn() };
  return db.transaction(async (tx) => {
    const result = LockAnswer.parse(
      await tx.execute(sql`select pg_try_advisory_xact_lock(${lockKey(task)}) as ok`),
    );
    if (!result.rows[0]?.ok) return { ran: false };
    return { ran: true, value: await fn() };
  });
}
