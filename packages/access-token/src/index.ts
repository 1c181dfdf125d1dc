import {
  createHmac,
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  type KeyObject,
  randomBytes,
  sign as signBytes,
  timingSafeEqual,
  verify as verifyBytes,
} from "node:crypto";

/**
 * Compact access tokens: `base64url(json claims).base64url(signature)`.
 *
 * The algorithm is chosen by the KEY the caller holds, never by the token: an Ed25519
 * private/public key signs/verifies with Ed25519 (control plane → agent, where the agent
 * must not be able to mint), a secret key uses HMAC-SHA256 (the agent's own cookies,
 * which only the agent ever reads). A token therefore cannot ask to be checked with a
 * weaker algorithm.
 */

/** Where, on every box host, the agent exchanges a hand-off token for its cookie. */
export const AUTH_PATH = "/__doppio/auth";
/** A control-plane hand-off only has to survive one redirect to the box host. */
export const HANDOFF_TTL_SECONDS = 60;
/**
 * The agent's box-access cookie lifetime. The control plane needs it too: it must keep
 * telling agents about a signed-out session for as long as a cookie from it could live.
 */
export const COOKIE_TTL_SECONDS = 12 * 60 * 60;

export const AUDIENCES = ["code", "site"] as const;
export type Audience = (typeof AUDIENCES)[number];

export interface AccessClaims {
  /** Box slug the token opens. */
  sub: string;
  /** User id the token was issued to. */
  usr: string;
  aud: Audience;
  /** Expiry, seconds since the Unix epoch. */
  exp: number;
  /** Random token id: two tokens minted in the same second still differ (single-use checks). */
  jti?: string;
  /**
   * The one box host the token is good for, as `hostKey` spells it (with `sub`, it names
   * the host): a cookie issued on a dev-port host does not open code-server.
   */
  hst?: string;
  /**
   * Which control-plane sign-in the token descends from (an opaque hash, never the session
   * secret), so that signing out can end the box-access cookies it led to.
   */
  sid?: string;
}

export const FAILURE_REASONS = [
  "malformed",
  "bad_signature",
  "expired",
  "wrong_subject",
  "wrong_audience",
  "wrong_user",
  "wrong_host",
] as const;
export type FailureReason = (typeof FAILURE_REASONS)[number];

export type VerifyResult = { ok: true; claims: AccessClaims } | { ok: false; reason: FailureReason };

/** What the verifier requires besides a good signature and an unexpired `exp`. */
export interface Expectation {
  sub?: string;
  usr?: string;
  aud?: Audience;
  hst?: string;
}

/**
 * The `hst` claim of a box host, without the slug and the domain (those are `sub` and the
 * server's own): `site`, `code`, or `dev:<port>`.
 */
export function hostKey(host: { kind: "site" | "code" | "dev"; port?: number }): string {
  return host.kind === "dev" ? `dev:${host.port}` : host.kind;
}

export type SigningKey = KeyObject;
export type VerifyingKey = KeyObject;

export function sign(key: SigningKey, claims: AccessClaims): string {
  assertClaims(claims);
  const payload = Buffer.from(JSON.stringify(claims), "utf8").toString("base64url");
  return `${payload}.${signPayload(key, payload).toString("base64url")}`;
}

/** Mint a token with a fresh `jti`, valid for `ttlSeconds` from `nowMs` (injected clock, ms since epoch). */
export function mint(
  key: SigningKey,
  claims: Omit<AccessClaims, "exp" | "jti">,
  ttlSeconds: number,
  nowMs: number,
): string {
  const jti = randomBytes(16).toString("base64url");
  return sign(key, { ...claims, exp: Math.floor(nowMs / 1000) + ttlSeconds, jti });
}

/**
 * Check signature, expiry (against `nowMs`, ms since epoch) and any expectations.
 * The signature is checked before the claims are trusted, so a forged token always
 * reports `bad_signature`, never a claim mismatch.
 */
export function verify(
  key: VerifyingKey,
  token: string,
  nowMs: number,
  expect: Expectation = {},
): VerifyResult {
  const parts = token.split(".");
  if (parts.length !== 2 || !B64URL.test(parts[0]!) || !B64URL.test(parts[1]!)) {
    return { ok: false, reason: "malformed" };
  }
  const [payload, sig] = parts as [string, string];
  const sigBytes = Buffer.from(sig, "base64url");
  // base64url leaves spare bits in the last character, so one signature has several
  // spellings; only the canonical one is a token (nothing may key on a re-spelled copy).
  if (sigBytes.toString("base64url") !== sig) return { ok: false, reason: "malformed" };
  if (!checkSignature(key, payload, sigBytes)) return { ok: false, reason: "bad_signature" };
  let claims: AccessClaims;
  try {
    claims = JSON.parse(Buffer.from(payload, "base64url").toString("utf8")) as AccessClaims;
    assertClaims(claims);
  } catch {
    return { ok: false, reason: "malformed" };
  }
  if (claims.exp * 1000 <= nowMs) return { ok: false, reason: "expired" };
  if (expect.sub !== undefined && claims.sub !== expect.sub) return { ok: false, reason: "wrong_subject" };
  if (expect.aud !== undefined && claims.aud !== expect.aud) return { ok: false, reason: "wrong_audience" };
  if (expect.usr !== undefined && claims.usr !== expect.usr) return { ok: false, reason: "wrong_user" };
  if (expect.hst !== undefined && claims.hst !== expect.hst) return { ok: false, reason: "wrong_host" };
  // Only the known claims, and only those present: nothing else in the payload reaches callers.
  const out: AccessClaims = { sub: claims.sub, usr: claims.usr, aud: claims.aud, exp: claims.exp };
  for (const k of ["jti", "hst", "sid"] as const) if (claims[k] !== undefined) out[k] = claims[k];
  return { ok: true, claims: out };
}

export function generateEd25519(): { privateKey: KeyObject; publicKey: KeyObject } {
  return generateKeyPairSync("ed25519");
}

export function privateKeyFromPem(pem: string): KeyObject {
  return createPrivateKey(pem);
}

export function publicKeyFromPem(pem: string): KeyObject {
  return createPublicKey(pem);
}

const B64URL = /^[A-Za-z0-9_-]+$/;

function signPayload(key: KeyObject, payload: string): Buffer {
  const data = Buffer.from(payload, "utf8");
  if (key.type === "secret") return createHmac("sha256", key).update(data).digest();
  if (key.type === "private" && key.asymmetricKeyType === "ed25519") return signBytes(null, data, key);
  throw new TypeError("signing key must be an Ed25519 private key or a secret key");
}

function checkSignature(key: KeyObject, payload: string, sig: Buffer): boolean {
  const data = Buffer.from(payload, "utf8");
  if (key.type === "secret") {
    const want = createHmac("sha256", key).update(data).digest();
    return sig.length === want.length && timingSafeEqual(sig, want);
  }
  if (key.type === "public" && key.asymmetricKeyType === "ed25519") {
    return sig.length === 64 && verifyBytes(null, data, key, sig);
  }
  throw new TypeError("verifying key must be an Ed25519 public key or a secret key");
}

function assertClaims(c: AccessClaims): void {
  const ok =
    typeof c === "object" &&
    c !== null &&
    typeof c.sub === "string" &&
    c.sub.length > 0 &&
    typeof c.usr === "string" &&
    c.usr.length > 0 &&
    (AUDIENCES as readonly string[]).includes(c.aud) &&
    Number.isSafeInteger(c.exp) &&
    optionalShortString(c.jti) &&
    optionalShortString(c.hst) &&
    optionalShortString(c.sid);
  if (!ok) throw new TypeError("access token claims need sub, usr, aud (code|site) and an integer exp");
}

function optionalShortString(v: unknown): boolean {
  return v === undefined || (typeof v === "string" && v.length > 0 && v.length <= 64);
}
