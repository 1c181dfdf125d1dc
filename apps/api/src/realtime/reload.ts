import { FINAL_JOB_STATUSES, type LogLine } from "@doppio/contracts";
import { and, asc, eq, gt, gte, lte, notInArray, or } from "drizzle-orm";
import { tasksOf, toPlays, toTask } from "../ansible/views.ts";
import type { Db } from "../db/client.ts";
import { agentJobs, ansiblePlays, ansibleTasks, boxes, boxLogs, servers } from "../db/schema.ts";
import { selectBoxViews, toBox } from "../services/box-view.ts";
import { toJob } from "../services/jobs.ts";
import { toLine } from "../services/logs.ts";
import type { PlayEvent, RealtimeEvent } from "./bus.ts";

/**
 * What a replica reads when another replica says a row changed (a notification carries a
 * topic and an id, never the row): the row as it is now, in the shape the stream sends.
 */
export interface BusReader {
  box(id: string): Promise<RealtimeEvent | null>;
  job(id: string): Promise<RealtimeEvent | null>;
  /** Lines of the box with `after < seq <= upTo` (no upper bound when `upTo` is absent). */
  logs(boxId: string, after: number, upTo?: number): Promise<LogLine[]>;
  /** The team's boxes and jobs that changed since `since`, plus every job still in flight. */
  teamSince(teamId: string, since: Date): Promise<RealtimeEvent[]>;
  /** An Ansible play as it is now (status, counters, progress). */
  play(id: string): Promise<PlayEvent | null>;
  task(playId: string, taskId: string): Promise<PlayEvent | null>;
  /** Everything a play's follower may have missed: every task, then the play. */
  playAll(id: string): Promise<PlayEvent[]>;
}

const LOG_LINES_MAX = 5000;

export function busReader(db: Db): BusReader {
  return {
    async box(id) {
      const [row] = await selectBoxViews(db, eq(boxes.id, id));
      return row ? { type: "box", box: toBox(row.box, row.server, row.ownerIdle) } : null;
    },
    async job(id) {
      const [row] = await db
        .select({ job: agentJobs, slug: boxes.slug, server: servers.name })
        .from(agentJobs)
        .innerJoin(boxes, eq(boxes.id, agentJobs.boxId))
        .innerJoin(servers, eq(servers.id, agentJobs.serverId))
        .where(eq(agentJobs.id, id));
      return row ? { type: "job", job: toJob(row.job, row.slug, row.server) } : null;
    },
    async logs(boxId, after, upTo) {
      const rows = await db
        .select()
        .from(boxLogs)
        .where(
          and(
            eq(boxLogs.boxId, boxId),
            gt(boxLogs.seq, after),
            upTo === undefined ? undefined : lte(boxLogs.seq, upTo),
          ),
        )
        .orderBy(asc(boxLogs.seq))
        .limit(LOG_LINES_MAX);
      return rows.map(toLine);
    },
    async play(id) {
      const [row] = await db
        .select({ play: ansiblePlays, server: servers.name })
        .from(ansiblePlays)
        .innerJoin(servers, eq(servers.id, ansiblePlays.serverId))
        .where(eq(ansiblePlays.id, id));
      if (!row) return null;
      const [play] = await toPlays(db, row.server, [row.play]);
      return { type: "play", play: play! };
    },
    async task(playId, taskId) {
      const [row] = await db
        .select()
        .from(ansibleTasks)
        .where(and(eq(ansibleTasks.playId, playId), eq(ansibleTasks.taskId, taskId)));
      return row ? { type: "task", task: toTask(row) } : null;
    },
    async playAll(id) {
      const play = await this.play(id);
      if (!play) return [];
      const tasks = (await tasksOf(db, id)).map((task): PlayEvent => ({ type: "task", task }));
      return [...tasks, play];
    },
    async teamSince(teamId, since) {
      const boxRows = await selectBoxViews(
        db,
        and(eq(boxes.teamId, teamId), gte(boxes.updatedAt, since)),
      ).orderBy(asc(boxes.updatedAt));
      const jobRows = await db
        .select({ job: agentJobs, slug: boxes.slug, server: servers.name })
        .from(agentJobs)
        .innerJoin(boxes, eq(boxes.id, agentJobs.boxId))
        .innerJoin(servers, eq(servers.id, agentJobs.serverId))
        .where(
          and(
            eq(boxes.teamId, teamId),
            or(
              notInArray(agentJobs.status, [...FINAL_JOB_STATUSES]),
              gte(agentJobs.createdAt, since),
              gte(agentJobs.finishedAt, since),
            ),
          ),
        )
        .orderBy(asc(agentJobs.seqNo));
      return [
        ...jobRows.map((r): RealtimeEvent => ({ type: "job", job: toJob(r.job, r.slug, r.server) })),
        ...boxRows.map((r): RealtimeEvent => ({ type: "box", box: toBox(r.box, r.server, r.ownerIdle) })),
      ];
    },
  };
}
