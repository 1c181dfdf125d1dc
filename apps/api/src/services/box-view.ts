import { allowedActions, type Box, boxUrls } from "@doppio/contracts";
import { eq } from "drizzle-orm";
import type { Ctx } from "../context.ts";
import { boxes, servers } from "../db/schema.ts";

export type BoxRow = typeof boxes.$inferSelect;
type ServerRow = typeof servers.$inferSelect;

export function toBox(
  row: BoxRow,
  server: Pick<ServerRow, "name" | "domain" | "publicScheme" | "publicPort"> | null,
): Box {
  const status = row.status;
  return {
    slug: row.slug,
    template: row.template,
    size: row.size,
    desiredState: row.desiredState,
    status,
    statusReason: row.statusReason,
    errorCode: row.errorCode,
    server: server?.name ?? null,
    ip: row.ip,
    urls: server
      ? boxUrls(row.slug, server.domain, server.publicScheme, server.publicPort ?? undefined)
      : null,
    env: row.env,
    repo: row.repo,
    allowedActions: [...allowedActions(status)],
    createdAt: row.createdAt.toISOString(),
    updatedAt: row.updatedAt.toISOString(),
  };
}

export async function loadBoxView(ctx: Ctx, boxId: string) {
  const [row] = await ctx.db
    .select({ box: boxes, server: servers })
    .from(boxes)
    .leftJoin(servers, eq(servers.id, boxes.serverId))
    .where(eq(boxes.id, boxId));
  return row ?? null;
}

/** Sends the box's current state to its team's realtime stream. */
export async function publishBox(ctx: Ctx, boxId: string) {
  const row = await loadBoxView(ctx, boxId);
  if (!row) return null;
  ctx.bus.publish(row.box.teamId, { type: "box", box: toBox(row.box, row.server) });
  return { teamId: row.box.teamId, slug: row.box.slug, serverName: row.server?.name ?? null };
}
