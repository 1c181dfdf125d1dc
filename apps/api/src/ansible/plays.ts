import {
  type AnsiblePlay,
  type AnsiblePlayWithTasks,
  PLAYBOOKS,
  type ServerSsh,
  type ServerSshRequest,
  type StartPlayRequest,
} from "@doppio/contracts";
import { desc, eq } from "drizzle-orm";
import { newId, newSecret, sha256 } from "../auth/secrets.ts";
import type { Ctx } from "../context.ts";
import { ansiblePlays, serverSsh, servers } from "../db/schema.ts";
import { AppError, notFound } from "../errors.ts";
import { audit } from "../services/audit.ts";
import type { ServerRow } from "../services/servers.ts";
import { isUniqueViolation, type Principal } from "../services/users.ts";
import type { PlayRunner } from "./runner.ts";
import { tasksOf, toPlays } from "./views.ts";

/** Inputs of the playbooks that are secrets: stored as "[redacted]", passed only to the child. */
const SECRET_VARS = new Set(["doppio_agent_token", "doppio_cloudflare_api_token"]);

async function serverByName(ctx: Ctx, name: string): Promise<ServerRow> {
  const [row] = await ctx.db.select().from(servers).where(eq(servers.name, name));
  if (!row) throw notFound(`server "${name}"`);
  return row;
}

function toSsh(row: typeof serverSsh.$inferSelect): ServerSsh {
  return {
    host: row.host,
    port: row.port,
    user: row.user,
    controlPlaneUrl: row.controlPlaneUrl,
    hostKeys: row.hostKeys,
  };
}

export async function getServerSsh(ctx: Ctx, name: string): Promise<{ ssh: ServerSsh | null }> {
  const server = await serverByName(ctx, name);
  const [row] = await ctx.db.select().from(serverSsh).where(eq(serverSsh.serverId, server.id));
  return { ssh: row ? toSsh(row) : null };
}

/** Sets the host's SSH address; a different host or port forgets the pinned host keys. */
export async function setServerSsh(
  ctx: Ctx,
  p: Principal,
  name: string,
  req: ServerSshRequest,
): Promise<ServerSsh> {
  const server = await serverByName(ctx, name);
  const [old] = await ctx.db.select().from(serverSsh).where(eq(serverSsh.serverId, server.id));
  const sameHost = old && old.host === req.host && old.port === req.port;
  const values = {
    host: req.host,
    port: req.port,
    user: req.user,
    controlPlaneUrl: req.controlPlaneUrl ?? null,
    hostKeys: sameHost ? old.hostKeys : null,
    updatedAt: ctx.clock.now(),
  };
  const [row] = await ctx.db
    .insert(serverSsh)
    .values({ serverId: server.id, ...values })
    .onConflictDoUpdate({ target: serverSsh.serverId, set: values })
    .returning();
  await audit(ctx, ctx.db, {
    user: p.userId,
    action: "server.set_ssh",
    targetType: "server",
    targetId: server.id,
    data: { host: req.host, port: req.port, user: req.user, keptHostKeys: Boolean(sameHost) },
  });
  return toSsh(row!);
}

/**
 * Starts a play on a server: one at a time per server (a partial unique index), a fresh
 * agent token for the host passed only to the child (the current one keeps working until
 * the agent uses the new one), the server `preparing` while a Prepare runs.
 */
export async function startPlay(
  ctx: Ctx,
  runner: PlayRunner,
  p: Principal,
  name: string,
  req: StartPlayRequest,
): Promise<AnsiblePlay> {
  const server = await serverByName(ctx, name);
  if (server.status === "archived") throw new AppError("conflict", `server "${name}" is archived`);
  const [ssh] = await ctx.db.select().from(serverSsh).where(eq(serverSsh.serverId, server.id));
  if (!ssh)
    throw new AppError(
      "conflict",
      `set how to reach server "${name}" over SSH first (POST /api/v1/servers/${name}/ssh)`,
    );
  const agentToken = newSecret("dpa");
  const vars: Record<string, unknown> = {
    ansible_host: ssh.host,
    ansible_port: ssh.port,
    ansible_user: ssh.user,
    doppio_control_plane_url: ssh.controlPlaneUrl ?? ctx.config.publicUrl,
    doppio_server_name: server.name,
    doppio_agent_token: agentToken,
    doppio_backend: server.backend,
    doppio_domain: server.domain,
    doppio_tls_mode: server.publicScheme,
    ...(server.publicScheme === "http" && server.publicPort
      ? { doppio_http_listen: `:${server.publicPort}` }
      : {}),
    ...(req.variables.allowTcg !== undefined ? { doppio_allow_tcg: req.variables.allowTcg } : {}),
    ...(req.variables.networkMode ? { doppio_network_mode: req.variables.networkMode } : {}),
    ...(req.variables.acmeEmail ? { doppio_acme_email: req.variables.acmeEmail } : {}),
    ...(ctx.config.agentBundle ? { doppio_agent_bundle: ctx.config.agentBundle } : {}),
  };
  const stored = Object.fromEntries(
    Object.entries(vars).map(([k, v]) => [k, SECRET_VARS.has(k) ? "[redacted]" : v]),
  );
  const id = newId();
  try {
    await ctx.db.transaction(async (tx) => {
      await tx.insert(ansiblePlays).values({
        id,
        serverId: server.id,
        playbook: req.playbook,
        createdBy: p.userId,
        variables: stored,
        createdAt: ctx.clock.now(),
      });
      await tx
        .update(servers)
        .set({
          nextAgentTokenHash: sha256(agentToken),
          ...(req.playbook === "prepare" ? { status: "preparing" as const, statusMessage: null } : {}),
        })
        .where(eq(servers.id, server.id));
    });
  } catch (err) {
    if (isUniqueViolation(err))
      throw new AppError("conflict", `a play is already pending or running on server "${name}"`);
    throw err;
  }
  await audit(ctx, ctx.db, {
    user: p.userId,
    action: `server.play.${req.playbook}`,
    targetType: "server",
    targetId: server.id,
    data: { play: id },
  });
  const launch = {
    playId: id,
    kind: req.playbook,
    playbook: PLAYBOOKS[req.playbook],
    serverId: server.id,
    serverName: server.name,
    vars,
    secrets: [agentToken],
    hostKeys: ssh.hostKeys,
  };
  // The answer is the play as accepted, read before the runner can move it on (a fast
  // runner used to make it `running` in some answers and `pending` in others).
  const accepted = await getPlayView(ctx, id);
  try {
    runner.launch(launch);
  } catch (err) {
    ctx.log.error({ err, play: id }, "could not start ansible-playbook");
    await ctx.db
      .update(ansiblePlays)
      .set({
        status: "failure",
        endedAt: ctx.clock.now(),
        error: "could not start ansible-playbook (see the control plane's log)",
      })
      .where(eq(ansiblePlays.id, id));
    return getPlayView(ctx, id);
  }
  return accepted;
}

export async function listPlays(ctx: Ctx, name: string): Promise<AnsiblePlay[]> {
  const server = await serverByName(ctx, name);
  const rows = await ctx.db
    .select()
    .from(ansiblePlays)
    .where(eq(ansiblePlays.serverId, server.id))
    .orderBy(desc(ansiblePlays.createdAt))
    .limit(50);
  return toPlays(ctx.db, server.name, rows);
}

async function getPlayView(ctx: Ctx, id: string): Promise<AnsiblePlay> {
  const [row] = await ctx.db
    .select({ play: ansiblePlays, server: servers.name })
    .from(ansiblePlays)
    .innerJoin(servers, eq(servers.id, ansiblePlays.serverId))
    .where(eq(ansiblePlays.id, id));
  if (!row) throw notFound("play");
  return (await toPlays(ctx.db, row.server, [row.play]))[0]!;
}

export async function getPlay(ctx: Ctx, id: string): Promise<AnsiblePlayWithTasks> {
  const play = await getPlayView(ctx, id);
  return { ...play, tasks: await tasksOf(ctx.db, id) };
}

/** Stops a pending or running play: its process group is signalled, the play ends `cancelled`. */
export async function cancelPlay(
  ctx: Ctx,
  runner: PlayRunner,
  p: Principal,
  id: string,
): Promise<AnsiblePlay> {
  const [row] = await ctx.db.select().from(ansiblePlays).where(eq(ansiblePlays.id, id));
  if (!row) throw notFound("play");
  if (row.status !== "pending" && row.status !== "running")
    throw new AppError("conflict", `the play has already ended (${row.status})`);
  await audit(ctx, ctx.db, {
    user: p.userId,
    action: "server.play.cancel",
    targetType: "server",
    targetId: row.serverId,
    data: { play: id },
  });
  if (!runner.cancel(id)) {
    // No process of ours runs it (it never started): it ends here.
    await ctx.db
      .update(ansiblePlays)
      .set({ status: "cancelled", endedAt: ctx.clock.now(), error: "cancelled by an administrator" })
      .where(eq(ansiblePlays.id, id));
  }
  return getPlayView(ctx, id);
}
