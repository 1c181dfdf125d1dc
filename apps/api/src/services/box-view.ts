import { allowedActions, type Box, boxUrls, effectiveIdleTimeout, idleHibernatesAt } from "@doppio/contracts";
import { eq, type SQL } from "drizzle-orm";
import type { Ctx } from "../context.ts";
import type { Db } from "../db/client.ts";
import { boxes, servers, users } from "../db/schema.ts";

export type BoxRow = typeof boxes.$inferSelect;
type ServerRow = typeof servers.$inferSelect;

/**
 * The box as the API shows it. `ownerIdleDefault` is its owner's idle timeout default
 * (users.idle_timeout_minutes), which applies when the box has none of its own.
 */
export function toBox(
  row: BoxRow,
  server:
    | (Pick<ServerRow, "name" | "domain" | "publicScheme" | "publicPort"> &
        Partial<Pick<ServerRow, "unreachableSince">>)
    | null,
  ownerIdleDefault: number | null = null,
): Box {
  // The host went silent: its boxes' last known states may no longer be true.
  const lost = !row.deletedAt && server?.unreachableSince ? server.unreachableSince : null;
  const status = lost ? "unknown" : row.status;
  const idleTimeout = effectiveIdleTimeout(row.idleTimeoutMinutes, ownerIdleDefault);
  const idleFrom = row.lastActiveAt ?? row.updatedAt;
  return {
    slug: row.slug,
    template: row.template,
    size: row.size,
    desiredState: row.desiredState,
    status,
    statusReason: lost
      ? `host ${server?.name} has not been heard from since ${lost.toISOString()}`
      : row.statusReason,
    errorCode: row.errorCode,
    server: server?.name ?? null,
    ip: row.ip,
    urls: server
      ? boxUrls(row.slug, server.domain, server.publicScheme, server.publicPort ?? undefined)
      : null,
    env: row.env,
    repo: row.repo,
    allowedActions: [...allowedActions(status)],
    memoryFileBytes: row.memoryFileBytes,
    idleTimeoutMinutes: idleTimeout,
    idleTimeoutCustom: row.idleTimeoutMinutes !== null,
    idleHibernatesAt:
      status === "running" ? (idleHibernatesAt(idleFrom, idleTimeout)?.toISOString() ?? null) : null,
    publicWake: row.publicWake,
    createdAt: row.createdAt.toISOString(),
    updatedAt: row.updatedAt.toISOString(),
  };
}

/** A box with its server and its owner's idle default, as `toBox` wants them. */
export type BoxView = NonNullable<Awaited<ReturnType<typeof loadBoxView>>>;

export async function loadBoxView(ctx: Ctx, boxId: string) {
  const [row] = await selectBoxViews(ctx.db, eq(boxes.id, boxId));
  return row ?? null;
}

/** The boxes `where` selects, with their servers and owners' idle defaults (one query). */
export function selectBoxViews(db: Db, where: SQL | undefined) {
  return db
    .select({ box: boxes, server: servers, ownerIdle: users.idleTimeoutMinutes })
    .from(boxes)
    .leftJoin(servers, eq(servers.id, boxes.serverId))
    .leftJoin(users, eq(users.id, boxes.ownerId))
    .where(where);
}

/** Sends the box's current state to its team's realtime stream. */
export async function publishBox(ctx: Ctx, boxId: string) {
  const row = await loadBoxView(ctx, boxId);
  if (!row) return null;
  ctx.bus.publish(row.box.teamId, {
    type: "box",
    box: toBox(row.box, row.server, row.ownerIdle),
  });
  return { teamId: row.box.teamId, slug: row.box.slug, serverName: row.server?.name ?? null };
}
