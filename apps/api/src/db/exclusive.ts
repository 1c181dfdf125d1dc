import { sql } from "drizzle-orm";
import { z } from "zod";
import type { Db } from "./client.ts";

/** node-postgres's answer to the lock query. */
const LockAnswer = z.object({ rows: z.array(z.object({ ok: z.boolean() })) });

/** First half of every advisory-lock key this control plane takes ("dop"), so other users of the database do not collide. */
const LOCK_CLASS = 0x646f70;

/**
 * Holds, until `tx` ends, the lock of decisions taken one at a time across replicas:
 * placement counts what every server has free, so concurrent creates count in turn; a
 * user's box quota counts that user's boxes, so the user's own creates count in turn
 * (`owner:<user id>`, taken before `placement`, never after). Advisory locks, not row locks
 * on the servers: heartbeats update those rows and must not queue behind every create.
 */
export async function serializeIn(tx: Db, decision: "placement" | `owner:${string}`): Promise<void> {
  await tx.execute(sql`select pg_advisory_xact_lock(${LOCK_CLASS}, hashtext(${decision}))`);
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
      await tx.execute(sql`select pg_try_advisory_xact_lock(${LOCK_CLASS}, hashtext(${task})) as ok`),
    );
    if (!result.rows[0]?.ok) return { ran: false };
    return { ran: true, value: await fn() };
  });
}
