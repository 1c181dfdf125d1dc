import {
  allowedActions,
  BOX_SIZES,
  type BoxAction,
  type BoxJobPayload,
  type CreateBoxRequest,
  canPerform,
  DEFAULT_GITHUB_WEB_URL,
  DESIRED_AFTER,
  type GitAuthor,
  generateSlug,
  IN_FLIGHT_STATUS,
  slugProblem,
} from "@doppio/contracts";
import { and, count, desc, eq, inArray, isNull, ne } from "drizzle-orm";
import { newId } from "../auth/secrets.ts";
import { requireCredit } from "../billing/funds.ts";
import type { Ctx } from "../context.ts";
import type { Db } from "../db/client.ts";
import { firstFree, serializeIn } from "../db/exclusive.ts";
import { agentJobs, boxes, servers, serverTemplates, templates, users } from "../db/schema.ts";
import { type Candidate, placeBox, type Resources } from "../domain/placement.ts";
import { AppError, notFound } from "../errors.ts";
import { usableRepos } from "../github/installations.ts";
import { audit } from "./audit.ts";
import { type BoxRow, type BoxView, publishBox, selectBoxViews, toBox } from "./box-view.ts";
import { usedOn, usedResources, usedSubquery } from "./capacity.ts";
import { loadGitAuthor } from "./git-author.ts";
import { insertJob, type JobRow } from "./jobs.ts";
import { isUniqueViolation, type Principal } from "./users.ts";
import { poolsForPlacement } from "./warm-pools.ts";

/** `owner/name` as GitHub spells it, when the user connected that repository; else a refusal. */
async function connectedRepo(ctx: Ctx, userId: string, fullName: string): Promise<string> {
  const [repo] = await usableRepos(ctx.db, userId, fullName);
  if (!repo) {
    throw new AppError(
      "validation_failed",
      `repository "${fullName}" is not one you connected on GitHub (see doppio github repos)`,
      { field: "repo" },
    );
  }
  return repo.fullName;
}

type TemplateRow = typeof templates.$inferSelect;

/** Where-clause of the live box `slug` placed on server `serverId` (agent-facing lookups). */
export const liveBoxOnServer = (serverId: string, slug: string) =>
  and(eq(boxes.slug, slug), eq(boxes.serverId, serverId), isNull(boxes.deletedAt));

/** Where-clause of the team's live box `slug`. */
const teamBox = (p: Principal, slug: string) =>
  and(eq(boxes.slug, slug), eq(boxes.teamId, p.teamId), isNull(boxes.deletedAt));

export async function findBox(ctx: Ctx, p: Principal, slug: string): Promise<BoxRow> {
  // Another team's box, a missing box and a string that cannot be a slug answer the same.
  if (slugProblem(slug)) throw notFound(`box "${slug}"`);
  const [row] = await ctx.db.select().from(boxes).where(teamBox(p, slug));
  if (!row) throw notFound(`box "${slug}"`);
  return row;
}

/** Like findBox, with what the API shows of it (a BoxView), in one query. */
export async function findBoxView(ctx: Ctx, p: Principal, slug: string): Promise<BoxView> {
  if (slugProblem(slug)) throw notFound(`box "${slug}"`);
  const [row] = await selectBoxViews(ctx.db, teamBox(p, slug));
  if (!row) throw notFound(`box "${slug}"`);
  return row;
}

const githubWebUrl = (ctx: Ctx) => ctx.github?.app.webUrl ?? DEFAULT_GITHUB_WEB_URL;

/** The payload of a job on `box`, whose owner's git identity is `gitAuthor` (loadGitAuthor). */
function jobPayload(ctx: Ctx, box: BoxRow, gitAuthor: GitAuthor | null): BoxJobPayload {
  return {
    slug: box.slug,
    template: box.template,
    templateVersion: box.templateVersion,
    vcpu: box.vcpu,
    memoryMb: box.memoryMb,
    diskGb: box.diskGb,
    env: box.env,
    owner: box.ownerId,
    sitePublic: box.sitePublic,
    publicWake: box.publicWake,
    repo: box.repo,
    githubUrl: githubWebUrl(ctx),
    gitAuthor,
  };
}

/** A server as placement weighs it, and its row as read (the new box's view shows it). */
type ServerCandidate = Candidate & { row: NonNullable<BoxView["server"]> };

/** Servers with what they have free and their golden status for the template. */
async function candidates(tx: Db, template: TemplateRow): Promise<ServerCandidate[]> {
  const used = usedSubquery(tx);
  const rows = await tx
    .select({
      server: servers,
      vcpu: used.vcpu,
      memoryMb: used.memoryMb,
      diskGb: used.diskGb,
      golden: serverTemplates.status,
    })
    .from(servers)
    .leftJoin(used, eq(used.serverId, servers.id))
    .leftJoin(
      serverTemplates,
      and(
        eq(serverTemplates.serverId, servers.id),
        eq(serverTemplates.template, template.name),
        eq(serverTemplates.version, template.version),
      ),
    )
    .where(eq(servers.status, "active"))
    .orderBy(servers.name);
  if (rows.length === 0) return [];
  const pools = await poolsForPlacement(tx);
  return rows.map(({ server: s, golden, ...used }) => ({
    id: s.id,
    name: s.name,
    status: s.status,
    lastHeartbeatAt: s.lastHeartbeatAt,
    capacity: { vcpu: s.vcpu, memoryMb: s.memoryMb, diskGb: s.diskGb },
    used: usedResources(used),
    golden: golden ?? null,
    pools: pools(s.id),
    row: s,
  }));
}

/** How many of the servers that fit a create tries to place on without waiting for another create. */
const SERVERS_TRIED = 4;

/** A create whose server filled up while it waited to place on it: it reads the servers again. */
class ServerTaken extends Error {}

/**
 * Picks the server for a box of `need` and holds its placement lock (`server:<id>`) until
 * `tx` ends, so two creates never both take a server's last room
 * (`test/placement-race.test.ts`). Creates on different servers do not wait for each other:
 * the best server another create is placing on right now is passed over for the next one
 * as good but for headroom (`others` of placeBox; this spreads creates sent together), and
 * only when every one tried is taken does this create wait for the best. Under the lock it
 * reads what that server's boxes take again, since a create that went first may have
 * filled it (then ServerTaken).
 */
async function placeAndHold(
  ctx: Ctx,
  tx: Db,
  template: TemplateRow,
  need: Resources,
): Promise<ServerCandidate> {
  const place = (hosts: ServerCandidate[]) =>
    placeBox(hosts, need, {
      now: ctx.clock.now(),
      heartbeatFreshMs: ctx.config.heartbeatFreshMs,
      allowColdBoot: template.isDefault,
      template: template.name,
    });
  const placement = place(await candidates(tx, template));
  if (!placement.ok) {
    throw new AppError("no_capacity", "no server can take this box right now; try again shortly", {
      reasons: placement.reasons,
    });
  }
  const tried = [placement.server, ...placement.others].slice(0, SERVERS_TRIED);
  const locks = tried.map((s) => `server:${s.id}` as const);
  let chosen = tried[await firstFree(tx, locks)];
  if (!chosen) {
    chosen = placement.server;
    await serializeIn(tx, `server:${chosen.id}`);
  }
  // Only other creates change what the server's boxes take while this one holds its lock.
  if (!place([{ ...chosen, used: await usedOn(tx, chosen.id) }]).ok) throw new ServerTaken();
  return chosen;
}

/**
 * Right after the commit that queued a job: wakes the server's claim long-poll and publishes
 * the box as the transaction left it. `view` is built from the rows the transaction wrote and
 * read, not read again: a read here would sit between the enqueue and the agent's claim, and
 * the stream hears this state before any the agent's reports make (it cannot have claimed yet).
 */
function announce(ctx: Ctx, serverId: string, view: BoxView): BoxView {
  ctx.bus.jobEnqueued(serverId);
  ctx.bus.publish(view.box.teamId, { type: "box", box: toBox(view.box, view.server, view.ownerIdle) });
  return view;
}

/**
 * Boxes a user may have at once: one user must not exhaust every server for everyone.
 * Returns, from the same read, the user's idle timeout (the new box's view shows it).
 */
async function checkQuota(ctx: Ctx, tx: Db, p: Principal): Promise<number | null> {
  const [row] = await tx
    .select({ n: count(boxes.id), idle: users.idleTimeoutMinutes })
    .from(users)
    .leftJoin(boxes, and(eq(boxes.ownerId, users.id), isNull(boxes.deletedAt)))
    .where(eq(users.id, p.userId))
    .groupBy(users.id);
  const quota = ctx.config.boxQuotaPerUser;
  if ((row?.n ?? 0) >= quota) {
    throw new AppError("forbidden", `box quota reached: at most ${quota} boxes per user; delete one first`, {
      quota,
    });
  }
  return row?.idle ?? null;
}

export async function createBox(
  ctx: Ctx,
  p: Principal,
  req: CreateBoxRequest,
): Promise<{ box: BoxRow; job: JobRow; view: BoxView }> {
  const [template] = await ctx.db.select().from(templates).where(eq(templates.name, req.template));
  if (!template)
    throw new AppError("validation_failed", `unknown template "${req.template}"`, { field: "template" });
  const size = req.size ?? template.defaultSize;
  const need = BOX_SIZES[size];
  const repo = req.repo === undefined ? null : await connectedRepo(ctx, p.userId, req.repo);
  for (let attempt = 0, taken = 0; ; attempt++) {
    const slug = req.name ?? generateSlug();
    try {
      const created = await ctx.db.transaction(async (tx) => {
        // First what only the owner's own creates change, under the owner's lock (two creates
        // of one user count in turn), so the lock every create waits for is held briefly.
        await serializeIn(tx, `owner:${p.userId}`);
        const ownerIdle = await checkQuota(ctx, tx, p);
        await requireCredit(ctx, tx, p.userId);
        const gitAuthor = await loadGitAuthor(tx, p.userId, githubWebUrl(ctx));
        const id = newId();
        await audit(ctx, tx, {
          user: p.userId,
          action: "box.create",
          targetType: "box",
          targetId: id,
          data: { slug },
        });
        const server = await placeAndHold(ctx, tx, template, need);
        const now = ctx.clock.now();
        const [box] = await tx
          .insert(boxes)
          .values({
            id,
            slug,
            teamId: p.teamId,
            ownerId: p.userId,
            template: template.name,
            templateVersion: template.version,
            serverId: server.id,
            size,
            ...need,
            desiredState: "running",
            status: IN_FLIGHT_STATUS.create,
            env: req.env ?? {},
            repo,
            createdAt: now,
            updatedAt: now,
          })
          .returning();
        const job = await insertJob(ctx, tx, {
          action: "create",
          boxId: box!.id,
          serverId: server.id,
          payload: jobPayload(ctx, box!, gitAuthor),
        });
        return { box: box!, job, view: { box: box!, server: server.row, ownerIdle } };
      });
      announce(ctx, created.job.serverId, created.view);
      return created;
    } catch (err) {
      if (err instanceof ServerTaken) {
        // Read the servers again: the room this create counted on was taken while it waited.
        if (++taken < 10) continue;
        throw new AppError("no_capacity", "servers are busy placing other boxes; try again shortly");
      }
      if (!isUniqueViolation(err)) throw err;
      if (req.name)
        throw new AppError("conflict", `a box named "${req.name}" already exists`, { field: "name" });
      if (attempt >= 5) throw err;
    }
  }
}

/** A queued action: the box and its job, and the box as announced (none when deduplicated). */
export interface ActionResult {
  box: BoxRow;
  job: JobRow;
  deduplicated: boolean;
  view?: BoxView;
}

/**
 * Queues a lifecycle action. An identical action already in flight is returned as is
 * (deduplicated); any other in-flight job makes this a conflict.
 */
export async function performAction(
  ctx: Ctx,
  p: Principal,
  slug: string,
  action: Exclude<BoxAction, "create">,
): Promise<ActionResult> {
  return actOnBox(ctx, await findBox(ctx, p, slug), action, { user: p.userId });
}

/**
 * Queues `action` for `box` on behalf of `actor`: a user, or a server whose edge or idle
 * timer asked (`reason` goes into the audit log). An identical job in flight is returned as
 * is; any other job in flight, or an action the box's state does not allow, is a conflict.
 */
export async function actOnBox(
  ctx: Ctx,
  box: BoxRow,
  action: Exclude<BoxAction, "create">,
  actor: { user?: string; server?: string; reason?: string },
): Promise<ActionResult> {
  const slug = box.slug;
  // A start (a resume or a wake included) needs credit; stopping and hibernating never do.
  if (action === "start") await requireCredit(ctx, ctx.db, box.ownerId);
  // The box's job in flight (at most one), its host and its owner's idle timeout, in one read.
  const [{ inflight, host, ownerIdle } = { inflight: null, host: null, ownerIdle: null }] = await ctx.db
    .select({ inflight: agentJobs, host: servers, ownerIdle: users.idleTimeoutMinutes })
    .from(boxes)
    .leftJoin(servers, eq(servers.id, boxes.serverId))
    .leftJoin(users, eq(users.id, boxes.ownerId))
    .leftJoin(
      agentJobs,
      and(eq(agentJobs.boxId, boxes.id), inArray(agentJobs.status, ["pending", "delivered", "running"])),
    )
    .where(eq(boxes.id, box.id));
  if (inflight) {
    if (inflight.action === action) return { box, job: inflight, deduplicated: true };
    throw new AppError("conflict", `box "${slug}" already has a ${inflight.action} job in progress`, {
      job: inflight.id,
      action: inflight.action,
    });
  }
  if (host?.unreachableSince) {
    // Its state is unknown and its disk is on that host: nothing to do until it is back.
    throw new AppError(
      "conflict",
      `box "${slug}" is on host ${host.name}, which is unreachable; try again once it is back`,
      {
        status: "unknown",
        allowedActions: [],
      },
    );
  }
  if (!canPerform(box.status, action)) {
    throw new AppError("conflict", `cannot ${action} box "${slug}" while it is ${box.status}`, {
      status: box.status,
      allowedActions: allowedActions(box.status),
    });
  }
  try {
    const result = await ctx.db.transaction(async (tx) => {
      const gitAuthor = await loadGitAuthor(tx, box.ownerId, githubWebUrl(ctx));
      const now = ctx.clock.now();
      const [updated] = await tx
        .update(boxes)
        .set({
          status: IN_FLIGHT_STATUS[action],
          desiredState: DESIRED_AFTER[action],
          statusReason: null,
          updatedAt: now,
        })
        .where(and(eq(boxes.id, box.id), eq(boxes.status, box.status)))
        .returning();
      if (!updated) throw new AppError("conflict", `box "${slug}" changed state; try again`);
      const job = await insertJob(ctx, tx, {
        action,
        boxId: box.id,
        serverId: box.serverId!,
        payload: jobPayload(ctx, updated, gitAuthor),
      });
      await audit(ctx, tx, {
        ...(actor.user ? { user: actor.user } : {}),
        ...(actor.server ? { server: actor.server } : {}),
        action: `box.${action}`,
        targetType: "box",
        targetId: box.id,
        data: actor.reason ? { slug, reason: actor.reason } : { slug },
      });
      return { box: updated, job, deduplicated: false };
    });
    const view = { box: result.box, server: host, ownerIdle };
    return { ...result, view: announce(ctx, result.job.serverId, view) };
  } catch (err) {
    if (isUniqueViolation(err)) throw new AppError("conflict", `box "${slug}" already has a job in progress`);
    throw err;
  }
}

export async function listBoxes(ctx: Ctx, p: Principal) {
  return selectBoxViews(ctx.db, and(eq(boxes.teamId, p.teamId), isNull(boxes.deletedAt))).orderBy(
    desc(boxes.createdAt),
  );
}

export async function updateBoxEnv(
  ctx: Ctx,
  p: Principal,
  slug: string,
  env: Record<string, string>,
): Promise<void> {
  const box = await findBox(ctx, p, slug);
  await ctx.db
    .update(boxes)
    .set({ env, updatedAt: ctx.clock.now() })
    .where(and(eq(boxes.id, box.id), ne(boxes.status, "deleted")));
  await audit(ctx, ctx.db, { user: p.userId, action: "box.env", targetType: "box", targetId: box.id });
  await publishBox(ctx, box.id);
}
