import { readFileSync } from "node:fs";
import path from "node:path";
import type { TaskStatus } from "@doppio/contracts";
import { and, eq, inArray } from "drizzle-orm";
import type { Ctx } from "../context.ts";
import { ansiblePlays, ansibleTasks, servers } from "../db/schema.ts";

/** Where a play's files live (inventory, known_hosts, the secrets file while it runs). */
export function playWorkDir(dataDir: string, playId: string): string {
  return path.resolve(dataDir, "plays", playId);
}

/** Signals a play's whole process group (ansible-playbook, its workers, their ssh). */
export function killGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch {
    // the group has ended
  }
}

/**
 * Tasks left running get `running` status; pending ones become skipped only when the play
 * succeeded. Returns the tasks it changed (the runner tells the play's followers).
 */
export async function settleTasks(
  ctx: Ctx,
  playId: string,
  running: TaskStatus,
  skipPending: boolean,
): Promise<(typeof ansibleTasks.$inferSelect)[]> {
  const ended = await ctx.db
    .update(ansibleTasks)
    .set({ status: running, endedAt: ctx.clock.now() })
    .where(and(eq(ansibleTasks.playId, playId), eq(ansibleTasks.status, "running")))
    .returning();
  if (!skipPending) return ended;
  const skipped = await ctx.db
    .update(ansibleTasks)
    .set({ status: "skipped" })
    .where(and(eq(ansibleTasks.playId, playId), eq(ansibleTasks.status, "pending")))
    .returning();
  return [...ended, ...skipped];
}

/** Ends plays that no process is running any more as `failure: interrupted`; their servers show it. */
async function markInterrupted(ctx: Ctx, playIds: string[], why: string): Promise<void> {
  if (playIds.length === 0) return;
  const error = `interrupted: ${why}`;
  const ended = await ctx.db
    .update(ansiblePlays)
    .set({ status: "failure", error, endedAt: ctx.clock.now(), pid: null })
    .where(and(inArray(ansiblePlays.id, playIds), inArray(ansiblePlays.status, ["pending", "running"])))
    .returning({ id: ansiblePlays.id, serverId: ansiblePlays.serverId, playbook: ansiblePlays.playbook });
  for (const p of ended) {
    await settleTasks(ctx, p.id, "cancelled", false);
    await ctx.db
      .update(servers)
      .set({
        status: "error",
        statusMessage: `${p.playbook === "prepare" ? "Prepare server" : "Deploy agent"}: ${error}`,
      })
      .where(eq(servers.id, p.serverId));
  }
}

/**
 * At start: plays a previous control-plane process left pending or running have no one to
 * finish them. Each ends `failure: interrupted`; an ansible-playbook it left behind (its
 * command line names the play's directory, so a reused pid is not mistaken for it) is killed.
 */
export async function recoverInterruptedPlays(ctx: Ctx): Promise<number> {
  const stale = await ctx.db
    .select({ id: ansiblePlays.id, pid: ansiblePlays.pid })
    .from(ansiblePlays)
    .where(inArray(ansiblePlays.status, ["pending", "running"]));
  // Ended first, then its orphan killed: a process still watching the child (the previous
  // control plane, if it is not quite dead) finds the play over and records nothing else.
  await markInterrupted(
    ctx,
    stale.map((p) => p.id),
    "the control plane restarted during the play",
  );
  for (const p of stale) {
    if (!p.pid) continue;
    try {
      const cmdline = readFileSync(`/proc/${p.pid}/cmdline`, "utf8");
      if (cmdline.includes(playWorkDir(ctx.config.dataDir, p.id))) killGroup(p.pid, "SIGKILL");
    } catch {
      // gone
    }
  }
  if (stale.length > 0) ctx.log.warn({ plays: stale.map((p) => p.id) }, "plays interrupted by a restart");
  return stale.length;
}
