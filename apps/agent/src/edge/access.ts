import { createSecretKey, type KeyObject, randomBytes } from "node:crypto";
import { chmod, mkdir, readFile, rename, writeFile } from "node:fs/promises";
import { join } from "node:path";
import {
  type AccessClaims,
  AUTH_PATH,
  type Audience,
  COOKIE_TTL_SECONDS,
  mint,
  verify,
} from "@doppio/access-token";
import { EdgeError } from "./errors.ts";

export { AUTH_PATH } from "@doppio/access-token";
export const ACCESS_COOKIE = "doppio_access";
const KEY_FILE = "edge-cookie.key";
const KEY_BYTES = 32;

/**
 * Cookie key: a random HMAC-SHA256 secret created on first start and kept in the agent's
 * data dir (0600). Symmetric is enough because only this agent ever signs or reads its
 * cookies, and HMAC verification is far cheaper than Ed25519 on a check that runs for every
 * proxied request. Persisting it keeps users signed in across agent restarts; deleting the
 * file signs everyone out of this host.
 */
export async function loadOrCreateCookieKey(dataDir: string): Promise<KeyObject> {
  const file = join(dataDir, KEY_FILE);
  let raw: Buffer | null = null;
  try {
    raw = Buffer.from((await readFile(file, "utf8")).trim(), "base64url");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") {
      throw new EdgeError("bad_key_file", "cannot read the edge cookie key", {
        cause: err,
        details: { file },
      });
    }
  }
  if (raw) {
    if (raw.length !== KEY_BYTES) {
      throw new EdgeError("bad_key_file", "edge cookie key has the wrong length", { details: { file } });
    }
    return createSecretKey(raw);
  }
  const key = randomBytes(KEY_BYTES);
  await mkdir(dataDir, { recursive: true });
  const tmp = `${file}.${process.pid}.tmp`;
  await writeFile(tmp, key.toString("base64url"), { mode: 0o600 });
  await chmod(tmp, 0o600);
  await rename(tmp, file);
  return createSecretKey(key);
}

export interface AccessDeps {
  /** Verifies hand-off tokens minted by the control plane (its Ed25519 public key). */
  controlPlaneKey: KeyObject;
  /** Signs and verifies this agent's own cookies. */
  cookieKey: KeyObject;
  /** ms since epoch. */
  now: () => number;
  /** Spent hand-offs and signed-out sessions, kept across restarts (store/edge-access.ts). */
  ledger: AccessLedger;
}

/** The edge's persistent memory; times are seconds since the epoch. */
interface AccessLedger {
  /** Marks a hand-off token id spent; false if it already was. */
  spend(jti: string, exp: number, nowSec: number): boolean;
  endSessions(sids: readonly string[], until: number): void;
  endedSessions(nowSec: number): string[];
}

/** Who may pass on one box host: its owner, with a token or cookie issued for this very host. */
export interface Principal {
  slug: string;
  owner: string;
  aud: Audience;
  /** `hostKey` of the requested host (`code`, `site`, `dev:5173`). */
  host: string;
}

/**
 * Owner-only access for code-server, dev ports and private sites: a one-time hand-off
 * token from the control plane is exchanged for a host-only cookie signed by the agent.
 * Both are bound to one box host and to the control-plane sign-in (`sid`) they came from;
 * when that sign-in ends (heartbeat `endedSessions`), its cookies stop working here.
 */
export class EdgeAccess {
  readonly #deps: AccessDeps;
  /** Read on every proxied request, so kept in memory; the ledger is its durable copy. */
  #ended: Set<string>;

  constructor(deps: AccessDeps) {
    this.#deps = deps;
    this.#ended = new Set(deps.ledger.endedSessions(this.#nowSec()));
  }

  /** Signed-out sessions from the control plane (every heartbeat answer carries the recent ones). */
  endSessions(sids: readonly string[]): void {
    const now = this.#nowSec();
    if (sids.some((sid) => !this.#ended.has(sid)))
      this.#deps.ledger.endSessions(sids, now + COOKIE_TTL_SECONDS);
    this.#ended = new Set(this.#deps.ledger.endedSessions(now));
  }

  /** True if any `doppio_access` cookie in the Cookie header opens this host for the box's owner. */
  cookieAllows(cookieHeader: string | undefined, p: Principal): boolean {
    if (!cookieHeader) return false;
    const now = this.#deps.now();
    for (const value of cookieValues(cookieHeader, ACCESS_COOKIE)) {
      const result = verify(this.#deps.cookieKey, value, now, expectation(p));
      if (result.ok && this.#liveSession(result.claims)) return true;
    }
    return false;
  }

  /** Check a hand-off token; on success it is spent and a Set-Cookie value is returned. */
  exchange(
    token: string,
    p: Principal,
    secure: boolean,
  ): { ok: true; setCookie: string } | { ok: false; reason: string } {
    const now = this.#deps.now();
    const result = verify(this.#deps.controlPlaneKey, token, now, expectation(p));
    if (!result.ok) return result;
    const { jti, sid, exp } = result.claims;
    // Single use by the token's id, not its text: the id is inside what was signed.
    if (!jti || !sid) return { ok: false, reason: "malformed" };
    if (!this.#liveSession(result.claims)) return { ok: false, reason: "signed_out" };
    if (!this.#deps.ledger.spend(jti, exp, this.#nowSec())) return { ok: false, reason: "already_used" };
    const cookie = mint(
      this.#deps.cookieKey,
      { sub: p.slug, usr: p.owner, aud: p.aud, hst: p.host, sid },
      COOKIE_TTL_SECONDS,
      now,
    );
    const attrs = [
      `${ACCESS_COOKIE}=${cookie}`,
      "Path=/",
      `Max-Age=${COOKIE_TTL_SECONDS}`,
      "HttpOnly",
      "SameSite=Lax",
    ];
    if (secure) attrs.push("Secure");
    return { ok: true, setCookie: attrs.join("; ") };
  }

  #liveSession(claims: AccessClaims): boolean {
    return claims.sid !== undefined && !this.#ended.has(claims.sid);
  }

  #nowSec(): number {
    return Math.floor(this.#deps.now() / 1000);
  }
}

function expectation(p: Principal) {
  return { sub: p.slug, usr: p.owner, aud: p.aud, hst: p.host };
}

function cookieValues(header: string, name: string): string[] {
  const out: string[] = [];
  for (const part of header.split(";")) {
    const eq = part.indexOf("=");
    if (eq !== -1 && part.slice(0, eq).trim() === name) out.push(part.slice(eq + 1).trim());
  }
  return out;
}

/**
 * Where to send the browser after sign-in: only a path on the same host. Anything that a
 * browser could read as another origin (`//evil.com`, `/\evil.com`, `https://…`, control
 * characters) falls back to `/`.
 */
export function safeNext(next: unknown): string {
  if (typeof next !== "string" || !next.startsWith("/") || next.startsWith("//")) return "/";
  // biome-ignore lint/suspicious/noControlCharactersInRegex: rejecting control characters is the point
  if (/[\\\u0000-\u001f\u007f]/.test(next)) return "/";
  let u: URL;
  try {
    u = new URL(next, "http://edge.invalid");
  } catch {
    return "/";
  }
  if (u.origin !== "http://edge.invalid" || u.pathname === AUTH_PATH) return "/";
  return `${u.pathname}${u.search}${u.hash}`;
}
