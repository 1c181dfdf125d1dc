import type { LogBatch, LogBatchAck, LogLine, LogsPage, LogsQuery } from "@doppio/contracts";
import { and, asc, desc, eq, gt, lte, sql } from "drizzle-orm";
import type { Ctx } from "../context.ts";
import { boxes, boxLogCursors, boxLogs } from "../db/schema.ts";
import { notFound } from "../errors.ts";
import { liveBoxOnServer } from "./boxes.ts";
import type { ServerRow } from "./servers.ts";

/** Lines kept per box: enough for a session's bench output, bounded for the database. */
export const LOG_KEEP_LINES = 5000;

type LogRow = typeof boxLogs.$inferSelect;

export const toLine = (r: LogRow): LogLine => ({
  seq: r.seq,
  at: r.at.toISOString(),
  source: r.source,
  text: r.text,
});

/**
 * Stores the part of an agent's batch the control plane does not hold yet (by file epoch
 * and byte offset), trims the box's log to the newest LOG_KEEP_LINES, and fans the new
 * lines out to followers after the commit.
 */
export async function appendLogs(
  ctx: Ctx,
  server: ServerRow,
  slug: string,
  batch: LogBatch,
): Promise<LogBatchAck> {
  const [box] = await ctx.db.select({ id: boxes.id }).from(boxes).where(liveBoxOnServer(server.id, slug));
  if (!box) throw notFound(`box "${slug}"`);
  const now = ctx.clock.now();
  const result = await ctx.db.transaction(async (tx) => {
    const [cursor] = await tx
      .select()
      .from(boxLogCursors)
      .where(eq(boxLogCursors.boxId, box.id))
      .for("update");
    if (cursor && batch.epoch < cursor.epoch) {
      // An older file than the one already followed: nothing of it is wanted any more.
      return { ack: { epoch: cursor.epoch, offset: cursor.offset, stored: 0 }, rows: [] as LogRow[] };
    }
    const from = cursor && batch.epoch === cursor.epoch ? cursor.offset : 0;
    const fresh = batch.lines.filter((l) => l.offset >= from);
    const rows =
      fresh.length === 0
        ? []
        : await tx
            .insert(boxLogs)
            .values(fresh.map((l) => ({ boxId: box.id, at: new Date(l.at), source: l.source, text: l.text })))
            .returning();
    const offset = Math.max(from, batch.end);
    await tx
      .insert(boxLogCursors)
      .values({ boxId: box.id, epoch: batch.epoch, offset, updatedAt: now })
      .onConflictDoUpdate({
        target: boxLogCursors.boxId,
        set: { epoch: batch.epoch, offset, updatedAt: now },
      });
    if (rows.length > 0) await trim(tx, box.id);
    return { ack: { epoch: batch.epoch, offset, stored: rows.length }, rows };
  });
  if (result.rows.length > 0) ctx.bus.publishLogs(box.id, result.rows.map(toLine));
  return result.ack;
}

type Tx = Parameters<Parameters<Ctx["db"]["transaction"]>[0]>[0];

async function trim(tx: Tx, boxId: string): Promise<void> {
  const [edge] = await tx
    .select({ seq: boxLogs.seq })
    .from(boxLogs)
    .where(eq(boxLogs.boxId, boxId))
    .orderBy(desc(boxLogs.seq))
    .offset(LOG_KEEP_LINES)
    .limit(1);
  if (edge) await tx.delete(boxLogs).where(and(eq(boxLogs.boxId, boxId), lte(boxLogs.seq, edge.seq)));
}

/** One page of a box's log: after `after`, or the newest `tail` lines. */
export async function readLogs(
  ctx: Ctx,
  boxId: string,
  q: LogsQuery,
  limit = LOG_KEEP_LINES,
): Promise<LogsPage> {
  const where = and(
    eq(boxLogs.boxId, boxId),
    q.after !== undefined ? gt(boxLogs.seq, q.after) : undefined,
    q.source ? eq(boxLogs.source, q.source) : undefined,
  );
  const rows =
    q.after !== undefined
      ? await ctx.db.select().from(boxLogs).where(where).orderBy(asc(boxLogs.seq)).limit(limit)
      : (
          await ctx.db
            .select()
            .from(boxLogs)
            .where(where)
            .orderBy(desc(boxLogs.seq))
            .limit(Math.min(q.tail, limit))
        ).reverse();
  const lines = rows.map(toLine);
  const next = lines.at(-1)?.seq ?? q.after ?? (await lastSeq(ctx, boxId));
  return { lines, next };
}

/** Seq of the box's newest line (0 if none): where an empty tail continues from. */
async function lastSeq(ctx: Ctx, boxId: string): Promise<number> {
  const [row] = await ctx.db
    .select({ seq: sql<number>`coalesce(max(${boxLogs.seq}), 0)`.mapWith(Number) })
    .from(boxLogs)
    .where(eq(boxLogs.boxId, boxId));
  return row?.seq ?? 0;
}
