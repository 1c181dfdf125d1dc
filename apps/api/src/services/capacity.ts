import { eq, isNull, sql } from "drizzle-orm";
import type { Db } from "../db/client.ts";
import { boxes } from "../db/schema.ts";
import type { Resources } from "../domain/placement.ts";

/**
 * What the live (not deleted) boxes on each server take, as a subquery with a row per
 * server (`serverId`, `vcpu`, `memoryMb`, `diskGb`). A hibernated box's saved memory is disk
 * it takes on its host, counted in whole GiB on top of its own disk.
 */
export function usedSubquery(db: Db) {
  return db
    .select({
      serverId: boxes.serverId,
      vcpu: sql<number>`coalesce(sum(${boxes.vcpu}), 0)::int`.as("used_vcpu"),
      memoryMb: sql<number>`coalesce(sum(${boxes.memoryMb}), 0)::int`.as("used_memory_mb"),
      diskGb:
        sql<number>`coalesce(sum(${boxes.diskGb} + ceil(coalesce(${boxes.memoryFileBytes}, 0) / 1073741824.0)), 0)::int`.as(
          "used_disk_gb",
        ),
    })
    .from(boxes)
    .where(isNull(boxes.deletedAt))
    .groupBy(boxes.serverId)
    .as("used");
}

/** A server's row of `usedSubquery` (absent: nothing on it) as resources. */
export function usedResources(
  u: { vcpu: number | null; memoryMb: number | null; diskGb: number | null } | undefined,
): Resources {
  return { vcpu: Number(u?.vcpu ?? 0), memoryMb: Number(u?.memoryMb ?? 0), diskGb: Number(u?.diskGb ?? 0) };
}

/** What the live boxes on each server take, by server id (see `usedSubquery`). */
export async function usedByServer(db: Db): Promise<(serverId: string) => Resources> {
  const rows = await db.select().from(usedSubquery(db));
  return (serverId) => usedResources(rows.find((r) => r.serverId === serverId));
}

/** What the live boxes on server `serverId` take, as committed when the query runs. */
export async function usedOn(db: Db, serverId: string): Promise<Resources> {
  const used = usedSubquery(db);
  const [row] = await db.select().from(used).where(eq(used.serverId, serverId));
  return usedResources(row);
}
