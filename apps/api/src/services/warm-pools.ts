import { BOX_SIZES, findTemplate, type Heartbeat, type Server, type WarmPoolSizes } from "@doppio/contracts";
import { and, eq, isNotNull, ne, notInArray, or } from "drizzle-orm";
import type { Ctx } from "../context.ts";
import type { Db } from "../db/client.ts";
import { servers, serverWarmPools, templates } from "../db/schema.ts";
import { excluded } from "../db/upsert.ts";
import type { PoolOnServer } from "../domain/placement.ts";
import { AppError, notFound } from "../errors.ts";
import { audit } from "./audit.ts";
import { getTemplate } from "./templates.ts";
import type { Principal } from "./users.ts";

/**
 * Warm pools (apps/agent/src/pool/warm.ts) as the control plane sees them: sizes an admin
 * sets per server and template (sent to the agent with every heartbeat answer), and the
 * agent's report (ready and filling clones) that placement and the Servers page read.
 */

type PoolRow = typeof serverWarmPools.$inferSelect;

/** Every server's pools, for the server views. */
export async function warmPoolViews(ctx: Ctx): Promise<(serverId: string) => Server["warmPool"]> {
  const rows = await ctx.db.select().from(serverWarmPools).orderBy(serverWarmPools.template);
  return (serverId) =>
    rows
      .filter((r) => r.serverId === serverId)
      .map((r: PoolRow) => ({
        template: r.template,
        size: r.size,
        target: r.target,
        ready: r.ready,
        filling: r.filling,
      }));
}

/** Stores the agent's pool report; templates it no longer reports read as empty. */
export async function recordWarmPools(ctx: Ctx, serverId: string, pool: Heartbeat["pool"]): Promise<void> {
  if (!pool) return;
  const now = ctx.clock.now();
  if (pool.length > 0) {
    await ctx.db
      .insert(serverWarmPools)
      .values(
        pool.map((p) => ({
          serverId,
          template: p.template,
          target: p.target,
          ready: p.ready,
          filling: p.filling,
          diskGb: p.diskGb ?? null,
          memoryMb: p.memoryMb ?? null,
          updatedAt: now,
        })),
      )
      .onConflictDoUpdate({
        target: [serverWarmPools.serverId, serverWarmPools.template],
        set: {
          target: excluded(serverWarmPools.target),
          ready: excluded(serverWarmPools.ready),
          filling: excluded(serverWarmPools.filling),
          diskGb: excluded(serverWarmPools.diskGb),
          memoryMb: excluded(serverWarmPools.memoryMb),
          updatedAt: now,
        },
      });
  }
  await ctx.db
    .update(serverWarmPools)
    .set({ ready: 0, filling: 0, updatedAt: now })
    .where(
      and(
        eq(serverWarmPools.serverId, serverId),
        or(ne(serverWarmPools.ready, 0), ne(serverWarmPools.filling, 0)),
        pool.length > 0
          ? notInArray(
              serverWarmPools.template,
              pool.map((p) => p.template),
            )
          : undefined,
      ),
    );
}

/**
 * Every active server's pools as placement counts them (domain/placement.ts): what one
 * clone takes as its agent reported it, or, from an agent that did not, what the template's
 * clones take by the catalog (a box of its default size's data volume, its golden's memory).
 * A size set here but not yet reported is counted at that size.
 */
export async function poolsForPlacement(tx: Db): Promise<(serverId: string) => PoolOnServer[]> {
  const rows = await tx
    .select({ pool: serverWarmPools, defaultSize: templates.defaultSize })
    .from(serverWarmPools)
    .leftJoin(templates, eq(templates.name, serverWarmPools.template));
  return (serverId) =>
    rows
      .filter(({ pool }) => pool.serverId === serverId)
      .map(({ pool: r, defaultSize }) => {
        const size = BOX_SIZES[defaultSize ?? "small"];
        return {
          template: r.template,
          target: Math.max(r.target, r.size ?? 0),
          ready: r.ready,
          filling: r.filling,
          diskGb: r.diskGb ?? size.diskGb,
          memoryMb: r.memoryMb ?? findTemplate(r.template)?.memoryMb ?? size.memoryMb,
        };
      });
}

/** The sizes set for this server, for its heartbeat answer; undefined when none was set. */
export async function warmPoolSizes(ctx: Ctx, serverId: string): Promise<WarmPoolSizes | undefined> {
  const rows = await ctx.db
    .select({ template: serverWarmPools.template, size: serverWarmPools.size })
    .from(serverWarmPools)
    .where(and(eq(serverWarmPools.serverId, serverId), isNotNull(serverWarmPools.size)));
  if (rows.length === 0) return undefined;
  return Object.fromEntries(rows.map((r) => [r.template, r.size ?? 0]));
}

/** Admin: pool sizes for some templates of a server (others keep theirs). */
export async function setWarmPoolSizes(
  ctx: Ctx,
  p: Principal,
  name: string,
  sizes: WarmPoolSizes,
): Promise<void> {
  const [server] = await ctx.db.select({ id: servers.id }).from(servers).where(eq(servers.name, name));
  if (!server) throw notFound(`server "${name}"`);
  for (const template of Object.keys(sizes)) {
    if (!(await getTemplate(ctx, template))) {
      throw new AppError("validation_failed", `unknown template "${template}"`, { field: "template" });
    }
  }
  const now = ctx.clock.now();
  await ctx.db.transaction(async (tx) => {
    for (const [template, size] of Object.entries(sizes)) {
      await tx
        .insert(serverWarmPools)
        .values({ serverId: server.id, template, size, updatedAt: now })
        .onConflictDoUpdate({
          target: [serverWarmPools.serverId, serverWarmPools.template],
          set: { size, updatedAt: now },
        });
    }
    await audit(ctx, tx, {
      user: p.userId,
      action: "server.warm_pool",
      targetType: "server",
      targetId: server.id,
      data: { sizes },
    });
  });
}
