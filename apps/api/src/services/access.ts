import { createHash, createPublicKey } from "node:crypto";
import {
  AUTH_PATH,
  COOKIE_TTL_SECONDS,
  generateEd25519,
  HANDOFF_TTL_SECONDS,
  hostKey,
  mint,
  privateKeyFromPem,
  type SigningKey,
} from "@doppio/access-token";
import { type BoxHost, codeHost, devHost, parseBoxHost, siteHost } from "@doppio/contracts";
import { and, desc, eq, gt, isNotNull, isNull, lte } from "drizzle-orm";
import { sha256 } from "../auth/secrets.ts";
import type { Ctx } from "../context.ts";
import type { Db } from "../db/client.ts";
import { boxAccessGrants, boxes, servers, settings } from "../db/schema.ts";
import { notFound } from "../errors.ts";
import { liveBoxOnServer } from "./boxes.ts";
import type { Principal } from "./users.ts";

const KEY_SETTING = "access_signing_key";
/**
 * At most this many ended sign-ins go to one server per heartbeat (newest first). The agent
 * keeps each one it has seen until its cookies have expired, so the cap only matters if
 * more than this many of the server's users sign out within one heartbeat.
 */
const MAX_ENDED_PER_HEARTBEAT = 5_000;

export interface AccessKeys {
  privateKey: SigningKey;
  /** SPKI PEM the agents verify hand-off tokens with (sent in every heartbeat answer). */
  publicKeyPem: string;
}

/** The control plane's Ed25519 key, created once and kept in the database (shared by replicas). */
export async function loadAccessKeys(db: Db): Promise<AccessKeys> {
  const { privateKey } = generateEd25519();
  await db
    .insert(settings)
    .values({ key: KEY_SETTING, value: privateKey.export({ format: "pem", type: "pkcs8" }).toString() })
    .onConflictDoNothing();
  const [row] = await db.select().from(settings).where(eq(settings.key, KEY_SETTING));
  const key = privateKeyFromPem(row!.value);
  return {
    privateKey: key,
    publicKeyPem: createPublicKey(key).export({ format: "pem", type: "spki" }).toString(),
  };
}

/**
 * The `sid` a sign-in's box-access tokens carry: a domain-separated hash of the sign-in's
 * stored hash (`sha256` of its session cookie or API token), so the browser that sees it
 * learns nothing it could sign in with, and both sign-out (from the cookie) and revoking an
 * API token (from its stored row) can compute it.
 */
export function accessSessionId(credentialHash: string): string {
  return createHash("sha256")
    .update("doppio box access\0")
    .update(credentialHash)
    .digest("base64url")
    .slice(0, 22);
}

/**
 * Where a signed-in user goes to open one of their box's private URLs: the box host's
 * hand-off path with a fresh single-use token. Only the box's owner gets one; anyone
 * else, like a host that is no box at all, gets the same 404. `credential` is the secret
 * the caller signed in with (its sign-out ends the cookies this leads to).
 */
export async function handoffUrl(
  ctx: Ctx,
  p: Principal,
  credential: string,
  host: string,
  next: string,
): Promise<string> {
  const candidates = await ctx.db.select().from(servers);
  for (const server of candidates) {
    const parsed = parseBoxHost(host, server.domain);
    if (!parsed) continue;
    const [box] = await ctx.db
      .select({ id: boxes.id, ownerId: boxes.ownerId })
      .from(boxes)
      .where(liveBoxOnServer(server.id, parsed.slug));
    if (!box || box.ownerId !== p.userId) break;
    const now = ctx.clock.now().getTime();
    const sid = accessSessionId(sha256(credential));
    await recordGrant(ctx, sid, server.id, now);
    const token = mint(
      ctx.access.privateKey,
      {
        sub: parsed.slug,
        usr: p.userId,
        aud: parsed.kind === "site" ? "site" : "code",
        hst: hostKey(parsed),
        sid,
      },
      HANDOFF_TTL_SECONDS,
      now,
    );
    // Rebuilt from the parsed box and the server's own domain, never from `host`:
    // `box.code.example.com:@evil.test` parses as the box, yet as a URL its host is evil.test.
    const port = server.publicPort ? `:${server.publicPort}` : "";
    const url = new URL(`${server.publicScheme}://${boxHostName(parsed, server.domain)}${port}${AUTH_PATH}`);
    url.searchParams.set("token", token);
    url.searchParams.set("next", next.startsWith("/") && !next.startsWith("//") ? next : "/");
    return url.toString();
  }
  throw notFound("box");
}

/**
 * Sign-out or a revoked API token (`credentialHash` as stored): every server this sign-in
 * opened a box on hears of it with its next heartbeat.
 */
export async function endBoxAccess(ctx: Ctx, credentialHash: string): Promise<void> {
  await ctx.db
    .update(boxAccessGrants)
    .set({ endedAt: ctx.clock.now() })
    .where(and(eq(boxAccessGrants.sid, accessSessionId(credentialHash)), isNull(boxAccessGrants.endedAt)));
}

/** The ended sign-ins whose box-access cookies a server's agent must refuse (heartbeat answer). */
export async function endedBoxAccess(ctx: Ctx, serverId: string): Promise<string[]> {
  const now = ctx.clock.now();
  const rows = await ctx.db
    .select({ sid: boxAccessGrants.sid })
    .from(boxAccessGrants)
    .where(
      and(
        eq(boxAccessGrants.serverId, serverId),
        isNotNull(boxAccessGrants.endedAt),
        gt(boxAccessGrants.expiresAt, now),
      ),
    )
    .orderBy(desc(boxAccessGrants.endedAt))
    .limit(MAX_ENDED_PER_HEARTBEAT);
  return rows.map((r) => r.sid);
}

/** Drops the grants no cookie can outlive any more (periodic, every server's). */
export async function purgeExpiredGrants(ctx: Ctx): Promise<void> {
  await ctx.db.delete(boxAccessGrants).where(lte(boxAccessGrants.expiresAt, ctx.clock.now()));
}

/** A cookie from this hand-off can live until the token's expiry plus the cookie's lifetime. */
async function recordGrant(ctx: Ctx, sid: string, serverId: string, nowMs: number): Promise<void> {
  const expiresAt = new Date(nowMs + (HANDOFF_TTL_SECONDS + COOKIE_TTL_SECONDS) * 1000);
  await ctx.db
    .insert(boxAccessGrants)
    .values({ sid, serverId, expiresAt })
    .onConflictDoUpdate({ target: [boxAccessGrants.sid, boxAccessGrants.serverId], set: { expiresAt } });
}

function boxHostName(box: BoxHost, domain: string): string {
  const d = domain.toLowerCase();
  if (box.kind === "site") return siteHost(box.slug, d);
  if (box.kind === "code") return codeHost(box.slug, d);
  return devHost(box.slug, box.port, d);
}
