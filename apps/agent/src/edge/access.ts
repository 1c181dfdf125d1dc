import { createSecretKey, type KeyObject, randomBytes } from "node:crypto";
import { chmod, mkdir, readFile, rename, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { type Audience, mint, type VerifyResult, verify } from "@doppio/access-token";
import { EdgeError } from "./errors.ts";

export const ACCESS_COOKIE = "doppio_access";
export const AUTH_PATH = "/__doppio/auth";
/** The control plane's hand-off token only has to survive one redirect. */
export const HANDOFF_TTL_SECONDS = 60;
export const COOKIE_TTL_SECONDS = 12 * 60 * 60;
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
}

export interface Principal {
  slug: string;
  owner: string;
  aud: Audience;
}

/**
 * Owner-only access for code-server, dev ports and private sites: a one-time hand-off
 * token from the control plane is exchanged for a host-only cookie signed by the agent.
 */
export class EdgeAccess {
  readonly #deps: AccessDeps;
  /** Hand-off tokens already exchanged (signature → exp seconds), so a leaked link is single-use. */
  readonly #spent = new Map<string, number>();

  constructor(deps: AccessDeps) {
    this.#deps = deps;
  }

  /** True if any `doppio_access` cookie in the Cookie header opens this box for its owner. */
  cookieAllows(cookieHeader: string | undefined, p: Principal): boolean {
    if (!cookieHeader) return false;
    const now = this.#deps.now();
    for (const value of cookieValues(cookieHeader, ACCESS_COOKIE)) {
      if (verify(this.#deps.cookieKey, value, now, { sub: p.slug, usr: p.owner, aud: p.aud }).ok) return true;
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
    const result: VerifyResult = verify(this.#deps.controlPlaneKey, token, now, {
      sub: p.slug,
      usr: p.owner,
      aud: p.aud,
    });
    if (!result.ok) return result;
    this.#prune(now);
    const sig = token.slice(token.indexOf(".") + 1);
    if (this.#spent.has(sig)) return { ok: false, reason: "already_used" };
    this.#spent.set(sig, result.claims.exp);
    const cookie = mint(
      this.#deps.cookieKey,
      { sub: p.slug, usr: p.owner, aud: p.aud },
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

  #prune(now: number): void {
    for (const [sig, exp] of this.#spent) if (exp * 1000 <= now) this.#spent.delete(sig);
  }
}

export function cookieValues(header: string, name: string): string[] {
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
