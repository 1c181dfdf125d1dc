import { newId } from "../auth/secrets.ts";
import type { Ctx } from "../context.ts";
import type { Db } from "../db/client.ts";
import { auditEvents } from "../db/schema.ts";

type Target = (typeof auditEvents.$inferInsert)["targetType"];

/** Who did what to which box or server, and when. */
export async function audit(
  ctx: Pick<Ctx, "clock">,
  db: Db,
  entry: {
    user?: string;
    server?: string;
    action: string;
    targetType: Target;
    targetId: string;
    data?: Record<string, unknown>;
  },
): Promise<void> {
  await db.insert(auditEvents).values({
    id: newId(),
    actorUserId: entry.user ?? null,
    actorServerId: entry.server ?? null,
    action: entry.action,
    targetType: entry.targetType,
    targetId: entry.targetId,
    data: entry.data ?? null,
    at: ctx.clock.now(),
  });
}
