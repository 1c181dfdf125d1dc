import { and, asc, eq, inArray, isNull } from "drizzle-orm";
import type { Ctx } from "../context.ts";
import type { Db } from "../db/client.ts";
import { githubAccounts, githubInstallations, githubInstallationUsers, githubRepos } from "../db/schema.ts";
import type { InstallationInfo, RepoInfo } from "./client.ts";

export type InstallationRow = typeof githubInstallations.$inferSelect;

/** Records (or refreshes) an installation as GitHub describes it. */
export async function upsertInstallation(
  ctx: Pick<Ctx, "clock">,
  db: Db,
  inst: InstallationInfo,
): Promise<void> {
  const now = ctx.clock.now();
  const row = {
    id: inst.id,
    accountLogin: inst.account.login,
    accountId: inst.account.id,
    accountType: inst.account.type,
    repositorySelection: inst.repositorySelection,
    suspendedAt: inst.suspended ? now : null,
    removedAt: null,
    updatedAt: now,
  };
  await db
    .insert(githubInstallations)
    .values(row)
    .onConflictDoUpdate({ target: githubInstallations.id, set: row });
}

/** Replaces the installation's repository list. */
export async function replaceRepos(db: Db, installationId: number, repos: RepoInfo[]): Promise<void> {
  await db.transaction(async (tx) => {
    await tx.delete(githubRepos).where(eq(githubRepos.installationId, installationId));
    if (repos.length > 0) await addRepos(tx, installationId, repos);
  });
}

export async function addRepos(db: Db, installationId: number, repos: RepoInfo[]): Promise<void> {
  if (repos.length === 0) return;
  await db
    .insert(githubRepos)
    .values(
      repos.map((r) => ({
        installationId,
        repoId: r.id,
        fullName: r.fullName,
        fullNameLower: r.fullName.toLowerCase(),
        private: r.private,
      })),
    )
    .onConflictDoNothing();
}

export async function removeRepos(db: Db, installationId: number, repoIds: number[]): Promise<void> {
  if (repoIds.length === 0) return;
  await db
    .delete(githubRepos)
    .where(and(eq(githubRepos.installationId, installationId), inArray(githubRepos.repoId, repoIds)));
}

/** An uninstalled installation: no token is minted for it again, and its repositories are forgotten. */
export async function markRemoved(ctx: Pick<Ctx, "clock">, db: Db, installationId: number): Promise<void> {
  await db
    .update(githubInstallations)
    .set({ removedAt: ctx.clock.now(), updatedAt: ctx.clock.now() })
    .where(eq(githubInstallations.id, installationId));
  await db.delete(githubRepos).where(eq(githubRepos.installationId, installationId));
}

export async function setSuspended(
  ctx: Pick<Ctx, "clock">,
  db: Db,
  installationId: number,
  suspended: boolean,
) {
  await db
    .update(githubInstallations)
    .set({ suspendedAt: suspended ? ctx.clock.now() : null, updatedAt: ctx.clock.now() })
    .where(eq(githubInstallations.id, installationId));
}

export async function connectUser(db: Db, installationId: number, userId: string): Promise<void> {
  await db.insert(githubInstallationUsers).values({ installationId, userId }).onConflictDoNothing();
}

/**
 * The installations a user may mint tokens from: ones they connected, still installed, not
 * suspended, and only while their GitHub account is linked (unlinking stops tokens).
 */
export async function usableInstallations(db: Db, userId: string): Promise<InstallationRow[]> {
  const rows = await db
    .select({ inst: githubInstallations })
    .from(githubInstallationUsers)
    .innerJoin(githubInstallations, eq(githubInstallations.id, githubInstallationUsers.installationId))
    .innerJoin(githubAccounts, eq(githubAccounts.userId, githubInstallationUsers.userId))
    .where(
      and(
        eq(githubInstallationUsers.userId, userId),
        isNull(githubInstallations.removedAt),
        isNull(githubInstallations.suspendedAt),
      ),
    )
    .orderBy(asc(githubInstallationUsers.connectedAt), asc(githubInstallations.id));
  return rows.map((r) => r.inst);
}

export type RepoRow = typeof githubRepos.$inferSelect;

/** Repositories of the user's usable installations (`fullName` case-insensitive filter when given). */
export async function usableRepos(db: Db, userId: string, fullName?: string): Promise<RepoRow[]> {
  const installs = await usableInstallations(db, userId);
  if (installs.length === 0) return [];
  const where = [
    inArray(
      githubRepos.installationId,
      installs.map((i) => i.id),
    ),
  ];
  if (fullName !== undefined) where.push(eq(githubRepos.fullNameLower, fullName.toLowerCase()));
  const order = new Map(installs.map((i, n) => [i.id, n]));
  const rows = await db
    .select()
    .from(githubRepos)
    .where(and(...where))
    .orderBy(asc(githubRepos.fullNameLower));
  return rows.sort((a, b) => order.get(a.installationId)! - order.get(b.installationId)!);
}

/** Every installation a user connected, whatever its state (for the settings page). */
export async function connectedInstallations(db: Db, userId: string): Promise<InstallationRow[]> {
  const rows = await db
    .select({ inst: githubInstallations })
    .from(githubInstallationUsers)
    .innerJoin(githubInstallations, eq(githubInstallations.id, githubInstallationUsers.installationId))
    .where(eq(githubInstallationUsers.userId, userId))
    .orderBy(asc(githubInstallations.accountLogin));
  return rows.map((r) => r.inst);
}
