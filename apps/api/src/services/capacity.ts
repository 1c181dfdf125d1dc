import { isNull, sql } from "drizzle-orm";
import type { Db } from "../db/client.ts";
import { boxes } from "../db/schema.ts";
import type { Resources } from "../domain/placement.ts";

/**
 * What the live (not deleted) boxes on each server take, by server id. A hibernated box's
 * saved memory is disk it takes on its host, counted in whole GiB on top of its own disk.
 */
export async function usedByServer(db: Db): Promise<(serverId: string) => Resources> {
  const rows = await db
    .select({
      serverId: boxes.serverId,
      vcpu: sql<number>`coalesce(sum(${boxes.vcpu}), 0)::int`,
      memoryMb: sql<number>`coalesce(sum(${boxes.memoryMb}), 0)::int`,
      diskGb: sql<number>`coalesce(sum(${boxes.diskGb} + ceil(coalesce(${boxes.memoryFileBytes}, 0) / 1073741824.0)), 0)::int`,
    })
    .from(boxes)
    .where(isNull(boxes.deletedAt))
    .groupBy(boxes.serverId);
  return (serverId) => {
    const u = rows.find((r) => r.serverId === serverId);
    return { vcpu: Number(u?.vcpu ?? 0), memoryMb: Number(u?.memoryMb ?? 0), diskGb: Number(u?.diskGb ?? 0) };
  };
}
