import {
  type Heartbeat,
  type HeartbeatResponse,
  type RegisterServerRequest,
  SERVER_ACTION_STATUS,
  type Server,
  type ServerAction,
  type ServerStatus,
  type TemplateAction,
} from "@doppio/contracts";
import { and, eq, inArray, isNull, lt, or, sql } from "drizzle-orm";
import { newId, newSecret, sha256 } from "../auth/secrets.ts";
import type { Ctx } from "../context.ts";
import { agentJobs, boxes, servers, serverTemplates } from "../db/schema.ts";
import { excluded } from "../db/upsert.ts";
import { poolReservation } from "../domain/placement.ts";
import { AppError, notFound } from "../errors.ts";
import { endedBoxAccess } from "./access.ts";
import { audit } from "./audit.ts";
import { publishBox } from "./box-view.ts";
import { usedByServer } from "./capacity.ts";
import { recordActivity } from "./idle.ts";
import { extendLeases, insertJob, type JobRow } from "./jobs.ts";
import { getTemplate } from "./templates.ts";
import { isUniqueViolation, type Principal } from "./users.ts";
import { poolsForPlacement, recordWarmPools, warmPoolSizes, warmPoolViews } from "./warm-pools.ts";

export type ServerRow = typeof servers.$inferSelect;

async function toServers(ctx: Ctx, rows: ServerRow[]): Promise<Server[]> {
  const used = await usedByServer(ctx.db);
  const golden = await ctx.db.select().from(serverTemplates);
  const pools = await warmPoolViews(ctx);
  const held = await poolsForPlacement(ctx.db);
  return rows.map((s) => {
    return {
      name: s.name,
      domain: s.domain,
      status: s.status,
      statusMessage: s.statusMessage,
      backend: s.backend,
      capacity: { vcpu: s.vcpu, memoryMb: s.memoryMb, diskGb: s.diskGb },
      used: used(s.id),
      reserved: poolReservation(held(s.id)),
      agentVersion: s.agentVersion,
      lastHeartbeatAt: s.lastHeartbeatAt?.toISOString() ?? null,
      unreachableSince: s.unreachableSince?.toISOString() ?? null,
      golden: Object.fromEntries(
        golden
          .filter((g) => g.serverId === s.id)
          .map((g) => [g.template, { status: g.status, version: g.version }]),
      ),
      warmPool: pools(s.id),
    };
  });
}

export async function listServers(ctx: Ctx): Promise<Server[]> {
  return toServers(ctx, await ctx.db.select().from(servers).orderBy(servers.name));
}

export async function getServer(ctx: Ctx, name: string): Promise<Server> {
  const rows = await ctx.db.select().from(servers).where(eq(servers.name, name));
  if (rows.length === 0) throw notFound(`server "${name}"`);
  return (await toServers(ctx, rows))[0]!;
}

export async function registerServer(
  ctx: Ctx,
  p: Principal,
  req: RegisterServerRequest,
): Promise<Server & { agentToken: string }> {
  const agentToken = newSecret("dpa");
  const id = newId();
  try {
    await ctx.db.insert(servers).values({
      id,
      name: req.name,
      domain: req.domain,
      status: req.status,
      backend: req.backend,
      ...req.capacity,
      publicScheme: req.publicScheme,
      publicPort: req.publicPort ?? null,
      agentTokenHash: sha256(agentToken),
      createdAt: ctx.clock.now(),
    });
  } catch (err) {
    if (isUniqueViolation(err)) throw new AppError("conflict", `a server named "${req.name}" already exists`);
    throw err;
  }
  await audit(ctx, ctx.db, { user: p.userId, action: "server.register", targetType: "server", targetId: id });
  return { ...(await getServer(ctx, req.name)), agentToken };
}

export async function rotateServerToken(
  ctx: Ctx,
  p: Principal,
  name: string,
): Promise<{ agentToken: string }> {
  const agentToken = newSecret("dpa");
  const rows = await ctx.db
    .update(servers)
    .set({ agentTokenHash: sha256(agentToken) })
    .where(eq(servers.name, name))
    .returning({ id: servers.id });
  if (rows.length === 0) throw notFound(`server "${name}"`);
  await audit(ctx, ctx.db, {
    user: p.userId,
    action: "server.rotate_token",
    targetType: "server",
    targetId: rows[0]!.id,
  });
  return { agentToken };
}

export async function serverForAgentToken(ctx: Ctx, token: string): Promise<ServerRow | null> {
  const hash = sha256(token);
  // One indexed read, whichever token it is: an unknown token (anyone can send one) costs no more.
  let [row] = await ctx.db
    .select()
    .from(servers)
    .where(or(eq(servers.agentTokenHash, hash), eq(servers.nextAgentTokenHash, hash)));
  if (row && row.agentTokenHash !== hash) {
    // The token a play handed the host (apps/api/src/ansible/plays.ts): its first use
    // makes it the server's token, and the one before it stops working.
    // Two first uses at once (an agent's first heartbeat and claim): one promotes it, the
    // other reads it promoted.
    const [promoted] = await ctx.db
      .update(servers)
      .set({ agentTokenHash: hash, nextAgentTokenHash: null })
      .where(eq(servers.nextAgentTokenHash, hash))
      .returning();
    [row] = promoted
      ? [promoted]
      : await ctx.db.select().from(servers).where(eq(servers.agentTokenHash, hash));
  }
  return row && row.status !== "archived" ? row : null;
}

/**
 * Records the host's truth: inventory, capacity, golden status, version. Returns the boxes
 * the control plane expects on this host and where the observed state drifted from them.
 */
export async function recordHeartbeat(
  ctx: Ctx,
  server: ServerRow,
  hb: Heartbeat,
): Promise<HeartbeatResponse> {
  const now = ctx.clock.now();
  await ctx.db
    .update(servers)
    .set({ lastHeartbeatAt: now, unreachableSince: null, agentVersion: hb.version, inventory: hb.vms })
    .where(eq(servers.id, server.id));
  if (server.unreachableSince) {
    ctx.log.info({ server: server.name, since: server.unreachableSince }, "host is back");
    await publishServerBoxes(ctx, server.id);
  }
  const golden = Object.entries(hb.golden);
  if (golden.length > 0) {
    await ctx.db
      .insert(serverTemplates)
      .values(
        golden.map(([template, g]) => ({
          serverId: server.id,
          template,
          status: g.status,
          version: g.version,
          updatedAt: now,
        })),
      )
      .onConflictDoUpdate({
        target: [serverTemplates.serverId, serverTemplates.template],
        set: {
          status: excluded(serverTemplates.status),
          version: excluded(serverTemplates.version),
          updatedAt: now,
        },
      });
  }
  await recordWarmPools(ctx, server.id, hb.pool);
  await extendLeases(ctx, server.id, hb.jobs);
  await recordActivity(ctx, server.id, hb.vms);
  const expected = await ctx.db
    .select({
      slug: boxes.slug,
      desiredState: boxes.desiredState,
      status: boxes.status,
      publicWake: boxes.publicWake,
    })
    .from(boxes)
    .where(and(eq(boxes.serverId, server.id), isNull(boxes.deletedAt)));
  const observed = new Map(hb.vms.map((v) => [v.slug, v.state]));
  const drift: HeartbeatResponse["drift"] = [];
  for (const box of expected) {
    const seen = observed.get(box.slug) ?? "gone";
    const settled = box.status === "running" || box.status === "stopped" || box.status === "hibernated";
    if (!settled) continue; // a job is moving it; the job's result is the truth
    const matches = box.status === "running" ? seen === "running" : seen !== "running";
    if (!matches) drift.push({ slug: box.slug, expected: box.status, observed: seen });
  }
  for (const [slug, state] of observed) {
    if (!expected.some((b) => b.slug === slug)) drift.push({ slug, expected: "absent", observed: state });
  }
  if (drift.length > 0) ctx.log.warn({ server: server.name, drift }, "host state drifted from intent");
  return {
    boxes: expected.map(({ slug, desiredState, publicWake }) => ({ slug, desiredState, publicWake })),
    drift,
    accessPublicKey: ctx.access.publicKeyPem,
    endedSessions: await endedBoxAccess(ctx, server.id),
    ...(await warmPoolSizes(ctx, server.id).then((w) => (w ? { warmPool: w } : {}))),
  };
}

/**
 * Queues a template job (golden snapshot or image build) for one server, at the template's
 * current version. One such job per server, template and action may be pending at a time.
 */
export async function enqueueTemplateJob(
  ctx: Ctx,
  p: Principal,
  serverName: string,
  action: TemplateAction,
  templateName: string,
): Promise<JobRow> {
  const [server] = await ctx.db.select().from(servers).where(eq(servers.name, serverName));
  if (!server) throw notFound(`server "${serverName}"`);
  const template = await getTemplate(ctx, templateName);
  if (!template)
    throw new AppError("validation_failed", `unknown template "${templateName}"`, { field: "template" });
  const job = await ctx.db.transaction(async (tx) => {
    const inflight = await tx
      .select()
      .from(agentJobs)
      .where(
        and(
          eq(agentJobs.serverId, server.id),
          eq(agentJobs.action, action),
          inArray(agentJobs.status, ["pending", "delivered", "running"]),
          sql`${agentJobs.payload}->>'template' = ${template.name}`,
        ),
      );
    if (inflight[0]) return inflight[0];
    return insertJob(ctx, tx, {
      action,
      boxId: null,
      serverId: server.id,
      payload: { template: template.name, templateVersion: template.version },
    });
  });
  ctx.bus.jobEnqueued(server.id);
  await audit(ctx, ctx.db, {
    user: p.userId,
    action: `server.${action}`,
    targetType: "server",
    targetId: server.id,
    data: { template: template.name, job: job.id },
  });
  return job;
}

/** Statuses an operator may move a server between with the server actions. */
const IN_SERVICE: readonly ServerStatus[] = ["active", "draining", "disabled"];

/** `drain`, `disable` or `activate` a server (SERVER_ACTION_STATUS in packages/contracts). */
export async function serverAction(
  ctx: Ctx,
  p: Principal,
  name: string,
  action: ServerAction,
): Promise<Server> {
  const [server] = await ctx.db.select().from(servers).where(eq(servers.name, name));
  if (!server) throw notFound(`server "${name}"`);
  if (!IN_SERVICE.includes(server.status)) {
    throw new AppError(
      "conflict",
      `server "${name}" is ${server.status}; only servers in service can ${action}`,
      {
        status: server.status,
      },
    );
  }
  const status = SERVER_ACTION_STATUS[action];
  await ctx.db.update(servers).set({ status }).where(eq(servers.id, server.id));
  await audit(ctx, ctx.db, {
    user: p.userId,
    action: `server.${action}`,
    targetType: "server",
    targetId: server.id,
    data: { from: server.status, to: status },
  });
  // Jobs that waited while it was disabled may go now.
  if (status === "active") ctx.bus.jobEnqueued(server.id);
  return getServer(ctx, name);
}

/**
 * Marks servers in service whose agent has been silent for longer than
 * `heartbeatFreshMs` as unreachable and tells their boxes' teams (the boxes now show
 * `unknown`). Nothing is moved: a box's disk lives on its host. The next heartbeat clears it.
 */
export async function markUnreachableServers(ctx: Ctx): Promise<string[]> {
  const now = ctx.clock.now();
  const silentSince = new Date(now.getTime() - ctx.config.heartbeatFreshMs);
  const lost = await ctx.db
    .update(servers)
    .set({ unreachableSince: now })
    .where(
      and(
        isNull(servers.unreachableSince),
        lt(servers.lastHeartbeatAt, silentSince),
        inArray(servers.status, [...IN_SERVICE]),
      ),
    )
    .returning({ id: servers.id, name: servers.name, lastHeartbeatAt: servers.lastHeartbeatAt });
  for (const s of lost) {
    ctx.log.warn(
      { server: s.name, lastHeartbeatAt: s.lastHeartbeatAt },
      "host unreachable; its boxes show unknown",
    );
    await publishServerBoxes(ctx, s.id);
  }
  return lost.map((s) => s.name);
}

async function publishServerBoxes(ctx: Ctx, serverId: string): Promise<void> {
  const rows = await ctx.db
    .select({ id: boxes.id })
    .from(boxes)
    .where(and(eq(boxes.serverId, serverId), isNull(boxes.deletedAt)));
  for (const row of rows) await publishBox(ctx, row.id);
}
