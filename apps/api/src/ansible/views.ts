import type { AnsiblePlay, AnsibleTask, PlayCounters } from "@doppio/contracts";
import { asc, eq, inArray, sql } from "drizzle-orm";
import type { Db } from "../db/client.ts";
import { type ansiblePlays, ansibleTasks } from "../db/schema.ts";

export type PlayRow = typeof ansiblePlays.$inferSelect;
export type TaskRow = typeof ansibleTasks.$inferSelect;

const ZERO_COUNTERS: PlayCounters = {
  ok: 0,
  changed: 0,
  failed: 0,
  skipped: 0,
  unreachable: 0,
  rescued: 0,
  ignored: 0,
};

const iso = (d: Date | null) => d?.toISOString() ?? null;
const ms = (from: Date | null, to: Date | null) => (from && to ? to.getTime() - from.getTime() : null);

export function toTask(t: TaskRow): AnsibleTask {
  return {
    id: t.taskId,
    position: t.position,
    name: t.name,
    role: t.role,
    handler: t.handler,
    status: t.status,
    startedAt: iso(t.startedAt),
    endedAt: iso(t.endedAt),
    durationMs: ms(t.startedAt, t.endedAt),
    output: t.output,
    error: t.error,
  };
}

/** Tasks finished (any result but pending/running) and known, per play. */
async function progressOf(db: Db, playIds: string[]): Promise<Map<string, { done: number; total: number }>> {
  if (playIds.length === 0) return new Map();
  const rows = await db
    .select({
      playId: ansibleTasks.playId,
      total: sql<number>`count(*)::int`,
      done: sql<number>`(count(*) filter (where ${ansibleTasks.status} not in ('pending', 'running')))::int`,
    })
    .from(ansibleTasks)
    .where(inArray(ansibleTasks.playId, playIds))
    .groupBy(ansibleTasks.playId);
  return new Map(rows.map((r) => [r.playId, { done: Number(r.done), total: Number(r.total) }]));
}

export async function toPlays(db: Db, serverName: string, rows: PlayRow[]): Promise<AnsiblePlay[]> {
  const progress = await progressOf(
    db,
    rows.map((r) => r.id),
  );
  return rows.map((p) => ({
    id: p.id,
    server: serverName,
    playbook: p.playbook,
    status: p.status,
    createdAt: p.createdAt.toISOString(),
    startedAt: iso(p.startedAt),
    endedAt: iso(p.endedAt),
    durationMs: ms(p.startedAt, p.endedAt),
    variables: p.variables,
    counters: p.counters ?? ZERO_COUNTERS,
    progress: progress.get(p.id) ?? { done: 0, total: 0 },
    error: p.error,
  }));
}

export async function tasksOf(db: Db, playId: string): Promise<AnsibleTask[]> {
  const rows = await db
    .select()
    .from(ansibleTasks)
    .where(eq(ansibleTasks.playId, playId))
    .orderBy(asc(ansibleTasks.position));
  return rows.map(toTask);
}
