import type { ApiToken, CreateTokenRequest, Me, Role } from "@doppio/contracts";
import { and, eq, gt, isNull, or } from "drizzle-orm";
import { dummyHash, hashPassword, needsRehash, scryptParams, verifyPassword } from "../auth/password.ts";
import { newId, newSecret, sha256 } from "../auth/secrets.ts";
import { verificationRequired } from "../config.ts";
import type { Ctx } from "../context.ts";
import { apiTokens, sessions, teamMembers, teams, users } from "../db/schema.ts";
import { AppError, notFound } from "../errors.ts";
import { endBoxAccess } from "./access.ts";
import { audit } from "./audit.ts";
import { markAccountVerified, sendFirstVerification } from "./verification.ts";

export interface Principal {
  userId: string;
  email: string;
  name: string | null;
  role: Role;
  emailVerified: boolean;
  teamId: string;
  teamName: string;
}

/**
 * Anyone may sign up; the account is an ordinary user (the admin comes from configuration).
 * Where verification is required it starts unverified, without trial credit, and its owner
 * is sent a link (services/verification.ts).
 */
export async function signup(
  ctx: Ctx,
  input: { email: string; password: string; name?: string | undefined },
): Promise<Principal> {
  const verified = !verificationRequired(ctx.config);
  const p = await createAccount(ctx, input, "user", { verified });
  if (!verified) await sendFirstVerification(ctx, { id: p.userId, email: p.email });
  return p;
}

/**
 * A user with their own team. `verified`: the address is known to be the user's (GitHub's
 * verified primary email, the configured admin, verification off), so the account is
 * verified at creation and gets its trial credit in the same transaction.
 */
export async function createAccount(
  ctx: Ctx,
  input: { email: string; password: string; name?: string | undefined },
  role: Role,
  opts: { verified: boolean },
): Promise<Principal> {
  const passwordHash = await hashPassword(input.password, scryptParams(ctx.config.passwordScryptN));
  const userId = newId();
  const teamId = newId();
  const teamName = `${input.name ?? input.email.split("@")[0]}'s team`;
  try {
    await ctx.db.transaction(async (tx) => {
      await tx.insert(users).values({
        id: userId,
        email: input.email,
        name: input.name ?? null,
        passwordHash,
        role,
        idleTimeoutMinutes: ctx.config.idleTimeoutDefaultMinutes || null,
        createdAt: ctx.clock.now(),
      });
      await tx.insert(teams).values({ id: teamId, name: teamName, createdAt: ctx.clock.now() });
      await tx.insert(teamMembers).values({ teamId, userId, role: "owner", createdAt: ctx.clock.now() });
      if (opts.verified) await markAccountVerified(ctx, tx, userId);
      await audit(ctx, tx, {
        user: userId,
        action: role === "admin" ? "user.bootstrap_admin" : "user.signup",
        targetType: "user",
        targetId: userId,
      });
    });
  } catch (err) {
    if (isUniqueViolation(err)) {
      throw new AppError("conflict", "an account with this email already exists", { field: "email" });
    }
    throw err;
  }
  return (await principalForUser(ctx, userId))!;
}

export async function login(ctx: Ctx, email: string, password: string): Promise<Principal> {
  const [user] = await ctx.db.select().from(users).where(eq(users.email, email));
  const params = scryptParams(ctx.config.passwordScryptN);
  const ok = await verifyPassword(password, user?.passwordHash ?? (await dummyHash(params)));
  if (!user || !ok) throw new AppError("unauthorized", "wrong email or password");
  if (needsRehash(user.passwordHash, params)) {
    // Changed hashing cost: the password is at hand only now, so this is when the hash moves.
    const passwordHash = await hashPassword(password, params);
    await ctx.db.update(users).set({ passwordHash }).where(eq(users.id, user.id));
  }
  return (await principalForUser(ctx, user.id))!;
}

/** A user with their teams (the first one joined is theirs), for one query to narrow. */
function principalRows(ctx: Ctx) {
  return ctx.db
    .select({ user: users, team: teams })
    .from(users)
    .innerJoin(teamMembers, eq(teamMembers.userId, users.id))
    .innerJoin(teams, eq(teams.id, teamMembers.teamId))
    .$dynamic();
}

export async function principalForUser(ctx: Ctx, userId: string): Promise<Principal | null> {
  const [row] = await principalRows(ctx).where(eq(users.id, userId)).orderBy(teamMembers.createdAt).limit(1);
  return row ? toPrincipal(row) : null;
}

function toPrincipal(row: { user: typeof users.$inferSelect; team: typeof teams.$inferSelect }): Principal {
  return {
    userId: row.user.id,
    email: row.user.email,
    name: row.user.name,
    role: row.user.role,
    emailVerified: row.user.emailVerifiedAt !== null,
    teamId: row.team.id,
    teamName: row.team.name,
  };
}

export function toMe(p: Principal): Me {
  return {
    id: p.userId,
    email: p.email,
    name: p.name,
    role: p.role,
    emailVerified: p.emailVerified,
    team: { id: p.teamId, name: p.teamName },
  };
}

export async function createSession(ctx: Ctx, userId: string): Promise<{ token: string; expiresAt: Date }> {
  const token = newSecret("dps");
  const expiresAt = new Date(ctx.clock.now().getTime() + ctx.config.sessionTtlHours * 3_600_000);
  await ctx.db
    .insert(sessions)
    .values({ tokenHash: sha256(token), userId, expiresAt, createdAt: ctx.clock.now() });
  return { token, expiresAt };
}

export async function deleteSession(ctx: Ctx, token: string): Promise<void> {
  await ctx.db.delete(sessions).where(eq(sessions.tokenHash, sha256(token)));
}

/** The session's user, in one query (every signed-in request asks). */
export async function principalForSession(ctx: Ctx, token: string): Promise<Principal | null> {
  const [row] = await principalRows(ctx)
    .innerJoin(sessions, eq(sessions.userId, users.id))
    .where(and(eq(sessions.tokenHash, sha256(token)), gt(sessions.expiresAt, ctx.clock.now())))
    .orderBy(teamMembers.createdAt)
    .limit(1);
  return row ? toPrincipal(row) : null;
}

export async function principalForApiToken(ctx: Ctx, token: string): Promise<Principal | null> {
  const [row] = await ctx.db
    .update(apiTokens)
    .set({ lastUsedAt: ctx.clock.now() })
    .where(
      and(
        eq(apiTokens.tokenHash, sha256(token)),
        isNull(apiTokens.revokedAt),
        or(isNull(apiTokens.expiresAt), gt(apiTokens.expiresAt, ctx.clock.now())),
      ),
    )
    .returning({ userId: apiTokens.userId });
  return row ? principalForUser(ctx, row.userId) : null;
}

const toApiToken = (t: typeof apiTokens.$inferSelect): ApiToken => ({
  id: t.id,
  name: t.name,
  prefix: t.prefix,
  createdAt: t.createdAt.toISOString(),
  lastUsedAt: t.lastUsedAt?.toISOString() ?? null,
  expiresAt: t.expiresAt?.toISOString() ?? null,
});

export async function createApiToken(
  ctx: Ctx,
  p: Principal,
  req: CreateTokenRequest,
): Promise<ApiToken & { token: string }> {
  const expiresAt = req.expiresAt ? new Date(req.expiresAt) : null;
  if (expiresAt && expiresAt <= ctx.clock.now()) {
    throw new AppError("validation_failed", "expiresAt must be in the future", { field: "expiresAt" });
  }
  const token = newSecret("dpb");
  const [row] = await ctx.db
    .insert(apiTokens)
    .values({
      id: newId(),
      userId: p.userId,
      name: req.name,
      prefix: token.slice(0, 10),
      tokenHash: sha256(token),
      createdAt: ctx.clock.now(),
      expiresAt,
    })
    .returning();
  await audit(ctx, ctx.db, {
    user: p.userId,
    action: "token.create",
    targetType: "token",
    targetId: row!.id,
  });
  return { ...toApiToken(row!), token };
}

export async function listApiTokens(ctx: Ctx, p: Principal): Promise<ApiToken[]> {
  const rows = await ctx.db
    .select()
    .from(apiTokens)
    .where(and(eq(apiTokens.userId, p.userId), isNull(apiTokens.revokedAt)))
    .orderBy(apiTokens.createdAt);
  return rows.map(toApiToken);
}

export async function revokeApiToken(ctx: Ctx, p: Principal, id: string): Promise<void> {
  const rows = await ctx.db
    .update(apiTokens)
    .set({ revokedAt: ctx.clock.now() })
    .where(and(eq(apiTokens.id, id), eq(apiTokens.userId, p.userId), isNull(apiTokens.revokedAt)))
    .returning({ id: apiTokens.id, tokenHash: apiTokens.tokenHash });
  if (rows.length === 0) throw notFound("token");
  // Box URLs opened with this token close too (their cookies carry its sid).
  await endBoxAccess(ctx, rows[0]!.tokenHash);
  await audit(ctx, ctx.db, { user: p.userId, action: "token.revoke", targetType: "token", targetId: id });
}

/** Postgres unique_violation, from node-postgres or PGlite (the latter may wrap it in `cause`). */
export function isUniqueViolation(err: unknown): boolean {
  for (let e: unknown = err; e && typeof e === "object"; e = (e as { cause?: unknown }).cause) {
    if ((e as { code?: unknown }).code === "23505") return true;
  }
  return false;
}
