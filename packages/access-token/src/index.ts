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
}

export const FAILURE_REASONS = [
  "malformed",
  "bad_signature",
  "expired",
  "wrong_subject",
  "wrong_audience",
  "wrong_user",
] as const;
export type FailureReason = (typeof FAILURE_REASONS)[number];

export type VerifyResult = { ok: true; claims: AccessClaims } | { ok: false; reason: FailureReason };

/** What the verifier requires besides a good signature and an unexpired `exp`. */
export interface Expectation {
  sub?: string;
  usr?: string;
  aud?: Audience;
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
  const jti = randomBytes(9).toString("base64url");
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
  if (!checkSignature(key, payload, Buffer.from(sig, "base64url")))
    return { ok: false, reason: "bad_signature" };
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
  const { sub, usr, aud, exp, jti } = claims;
  return { ok: true, claims: jti === undefined ? { sub, usr, aud, exp } : { sub, usr, aud, exp, jti } };
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
    (c.jti === undefined || (typeof c.jti === "string" && c.jti.length <= 64));
  if (!ok) throw new TypeError("access token claims need sub, usr, aud (code|site) and an integer exp");
}
