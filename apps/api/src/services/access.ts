import { createPublicKey } from "node:crypto";
import { generateEd25519, mint, privateKeyFromPem, type SigningKey } from "@doppio/access-token";
import { parseBoxHost } from "@doppio/contracts";
import { eq } from "drizzle-orm";
import type { Ctx } from "../context.ts";
import type { Db } from "../db/client.ts";
import { boxes, servers, settings } from "../db/schema.ts";
import { notFound } from "../errors.ts";
import { liveBoxOnServer } from "./boxes.ts";
import type { Principal } from "./users.ts";

/** Hand-off tokens are exchanged by the agent for its own cookie at once; keep them short. */
const HANDOFF_TTL_SECONDS = 60;
const KEY_SETTING = "access_signing_key";

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
 * Where a signed-in user goes to open one of their box's private URLs: the box host's
 * hand-off path with a fresh single-use token. Only the box's owner gets one; anyone
 * else, like a host that is no box at all, gets the same 404.
 */
export async function handoffUrl(ctx: Ctx, p: Principal, host: string, next: string): Promise<string> {
  const hostname = host.toLowerCase().replace(/:\d+$/, "");
  const candidates = await ctx.db.select().from(servers);
  for (const server of candidates) {
    const parsed = parseBoxHost(hostname, server.domain);
    if (!parsed) continue;
    const [box] = await ctx.db
      .select({ id: boxes.id, ownerId: boxes.ownerId })
      .from(boxes)
      .where(liveBoxOnServer(server.id, parsed.slug));
    if (!box || box.ownerId !== p.userId) break;
    const token = mint(
      ctx.access.privateKey,
      { sub: parsed.slug, usr: p.userId, aud: parsed.kind === "site" ? "site" : "code" },
      HANDOFF_TTL_SECONDS,
      ctx.clock.now().getTime(),
    );
    const port = server.publicPort ? `:${server.publicPort}` : "";
    const url = new URL(`${server.publicScheme}://${hostname}${port}/__doppio/auth`);
    url.searchParams.set("token", token);
    url.searchParams.set("next", next.startsWith("/") && !next.startsWith("//") ? next : "/");
    return url.toString();
  }
  throw notFound("box");
}
