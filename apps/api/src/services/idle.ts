import type { Heartbeat } from "@doppio/contracts";
import { and, eq, inArray, isNull, lt, lte, or, sql } from "drizzle-orm";
import type { Ctx } from "../context.ts";
import { agentJobs, boxes, users } from "../db/schema.ts";
import { AppError, notFound } from "../errors.ts";
import { audit } from "./audit.ts";
import { type BoxRow, publishBox } from "./box-view.ts";
import { actOnBox, findBox, liveBoxOnServer } from "./boxes.ts";
import type { Principal } from "./users.ts";

/**
 * Idle hibernation and wake-on-request, the control plane's half: it records when each
 * box was last used (reported by its host's edge with every heartbeat), hibernates running
 * boxes idle past their timeout, and resumes a hibernated box when its host's edge asks.
 * The rules (which timeout applies, when it runs out) are in packages/contracts/src/idle.ts.
 */

/** A box's new activity moves its timer; the stream hears of it at most once a minute per box. */
const PUBLISH_STEP_MS = 60_000;

/** Records the activity a heartbeat reports for this server's boxes (only ever forward). */
export async function recordActivity(ctx: Ctx, serverId: string, vms: Heartbeat["vms"]): Promise<void> {
  const reported = new Map(vms.flatMap((v) => (v.lastActiveAt ? [[v.slug, new Date(v.lastActiveAt)]] : [])));
  if (reported.size === 0) return;
  const rows = await ctx.db
    .select({ id: boxes.id, slug: boxes.slug, lastActiveAt: boxes.lastActiveAt })
    .from(boxes)
    .where(
      and(eq(boxes.serverId, serverId), isNull(boxes.deletedAt), inArray(boxes.slug, [...reported.keys()])),
    );
  const now = ctx.clock.now().getTime();
  for (const row of rows) {
    // An agent's clock ahead of ours must not keep a box awake for ever.
    const seen = new Date(Math.min(reported.get(row.slug)!.getTime(), now));
    const before = row.lastActiveAt?.getTime() ?? 0;
    if (seen.getTime() <= before) continue;
    // Activity alone is not a change the database announces to other replicas; a step the
    // stream hears of moves updated_at too, which is (drizzle/0024_bus_notes.sql).
    const announced = seen.getTime() - before >= PUBLISH_STEP_MS;
    await ctx.db
      .update(boxes)
      .set(announced ? { lastActiveAt: seen, updatedAt: new Date(now) } : { lastActiveAt: seen })
      .where(and(eq(boxes.id, row.id), or(isNull(boxes.lastActiveAt), lt(boxes.lastActiveAt, seen))));
    if (announced) await publishBox(ctx, row.id);
  }
}

/**
 * Queues a hibernate for every running box whose idle timeout ran out and that has no job
 * in flight (the reaper calls it on its interval). Returns the slugs it hibernated.
 */
export async function hibernateIdleBoxes(ctx: Ctx): Promise<string[]> {
  const now = ctx.clock.now();
  const timeout = sql<number>`coalesce(${boxes.idleTimeoutMinutes}, ${users.idleTimeoutMinutes}, 0)`;
  const rows = await ctx.db
    .select({ box: boxes })
    .from(boxes)
    .innerJoin(users, eq(users.id, boxes.ownerId))
    .where(
      and(
        eq(boxes.status, "running"),
        isNull(boxes.deletedAt),
        sql`${timeout} > 0`,
        lte(
          sql`coalesce(${boxes.lastActiveAt}, ${boxes.updatedAt}) + make_interval(mins => ${timeout})`,
          sql`${now.toISOString()}::timestamptz`,
        ),
      ),
    )
    .limit(100);
  const hibernated: string[] = [];
  for (const { box } of rows) {
    try {
      const r = await actOnBox(ctx, box, "hibernate", { server: box.serverId ?? undefined, reason: "idle" });
      if (!r.deduplicated) hibernated.push(box.slug);
    } catch (err) {
      // A job that got in first (conflict) wins; the box is looked at again next pass.
      if (!(err instanceof AppError && err.code === "conflict")) throw err;
    }
  }
  if (hibernated.length > 0) ctx.log.info({ boxes: hibernated }, "idle boxes hibernated");
  return hibernated;
}

/** The owner says the box is in use: its idle timer starts again. */
export async function keepAwake(ctx: Ctx, p: Principal, slug: string): Promise<BoxRow> {
  const box = await findBox(ctx, p, slug);
  const now = ctx.clock.now();
  await ctx.db.update(boxes).set({ lastActiveAt: now }).where(eq(boxes.id, box.id));
  await audit(ctx, ctx.db, { user: p.userId, action: "box.keep_awake", targetType: "box", targetId: box.id });
  await publishBox(ctx, box.id);
  return { ...box, lastActiveAt: now };
}

export async function setBoxIdle(
  ctx: Ctx,
  p: Principal,
  slug: string,
  body: { idleTimeoutMinutes: number | null; publicWake?: boolean | undefined },
): Promise<BoxRow> {
  const box = await findBox(ctx, p, slug);
  await ctx.db
    .update(boxes)
    .set({
      idleTimeoutMinutes: body.idleTimeoutMinutes,
      ...(body.publicWake === undefined ? {} : { publicWake: body.publicWake }),
      updatedAt: ctx.clock.now(),
    })
    .where(eq(boxes.id, box.id));
  await audit(ctx, ctx.db, {
    user: p.userId,
    action: "box.idle",
    targetType: "box",
    targetId: box.id,
    data: { idleTimeoutMinutes: body.idleTimeoutMinutes, publicWake: body.publicWake ?? box.publicWake },
  });
  await publishBox(ctx, box.id);
  return box;
}

export async function setIdleDefault(ctx: Ctx, p: Principal, minutes: number | null): Promise<void> {
  await ctx.db.update(users).set({ idleTimeoutMinutes: minutes }).where(eq(users.id, p.userId));
  await audit(ctx, ctx.db, {
    user: p.userId,
    action: "user.idle_default",
    targetType: "user",
    targetId: p.userId,
    data: { idleTimeoutMinutes: minutes },
  });
  // The boxes that follow the default show a new deadline.
  const following = await ctx.db
    .select({ id: boxes.id })
    .from(boxes)
    .where(and(eq(boxes.ownerId, p.userId), isNull(boxes.idleTimeoutMinutes), isNull(boxes.deletedAt)));
  for (const b of following) await publishBox(ctx, b.id);
}

/**
 * The edge of `serverId` saw an allowed request for hibernated box `slug`: queue its start
 * (a resume). A start already in flight is the answer; a box in any other state is a 409,
 * and another server's box (or none) is 404, like every agent-facing lookup.
 */
export async function wakeBox(
  ctx: Ctx,
  serverId: string,
  slug: string,
): Promise<{ waking: boolean; status: string }> {
  const [box] = await ctx.db.select().from(boxes).where(liveBoxOnServer(serverId, slug));
  if (!box) throw notFound(`box "${slug}"`);
  if (box.status !== "hibernated") {
    const [inflight] = await ctx.db
      .select({ action: agentJobs.action })
      .from(agentJobs)
      .where(
        and(eq(agentJobs.boxId, box.id), inArray(agentJobs.status, ["pending", "delivered", "running"])),
      );
    if (inflight?.action === "start") return { waking: true, status: box.status };
    throw new AppError("conflict", `box "${slug}" is ${box.status}, not hibernated`, { status: box.status });
  }
  const r = await actOnBox(ctx, box, "start", { server: serverId, reason: "wake" });
  return { waking: true, status: r.box.status };
}
