import { randomBytes, scrypt, timingSafeEqual } from "node:crypto";

export interface ScryptParams {
  N: number;
  r: number;
  p: number;
}

/**
 * OWASP's Password Storage Cheat Sheet: scrypt with N=2^17, r=8, p=1 (128 MiB per hash;
 * ~0.4 s on these hosts, off the event loop in libuv's pool). The control plane's
 * `passwordScryptN` may lower N for tests and development, never below 2^14.
 */
export const RECOMMENDED_SCRYPT_N = 1 << 17;
export const MIN_SCRYPT_N = 1 << 14;

/** The parameters new hashes are made with, for a configured N. */
export function scryptParams(N: number): ScryptParams {
  return { N, r: 8, p: 1 };
}

/**
 * scrypt needs 128·N·r bytes; Node's default ceiling (32 MiB) refuses N=2^17, so set one
 * with headroom. A stored hash that would need more is refused rather than run.
 */
const MAXMEM = 256 * 1024 * 1024;
const KEYLEN = 32;

function derive(password: string, salt: Buffer, params: ScryptParams): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    scrypt(password.normalize("NFKC"), salt, KEYLEN, { ...params, maxmem: MAXMEM }, (err, key) =>
      err ? reject(err) : resolve(key),
    );
  });
}

/** `scrypt$N$r$p$salt$hash`, salt and hash in base64url, so parameters can be raised later. */
export async function hashPassword(password: string, params: ScryptParams): Promise<string> {
  const salt = randomBytes(16);
  const key = await derive(password, salt, params);
  return ["scrypt", params.N, params.r, params.p, salt.toString("base64url"), key.toString("base64url")].join(
    "$",
  );
}

function parse(stored: string): { params: ScryptParams; salt: Buffer; hash: Buffer } | null {
  const [kind, n, r, p, salt, hash] = stored.split("$");
  const params = { N: Number(n), r: Number(r), p: Number(p) };
  if (kind !== "scrypt" || !salt || !hash) return null;
  if (![params.N, params.r, params.p].every((v) => Number.isSafeInteger(v) && v > 0)) return null;
  if (128 * params.N * params.r * params.p >= MAXMEM) return null;
  return { params, salt: Buffer.from(salt, "base64url"), hash: Buffer.from(hash, "base64url") };
}

export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const parsed = parse(stored);
  if (!parsed) return false;
  const key = await derive(password, parsed.salt, parsed.params);
  return key.length === parsed.hash.length && timingSafeEqual(key, parsed.hash);
}

/** True when the stored hash was made with other parameters than `current`. */
export function needsRehash(stored: string, current: ScryptParams): boolean {
  const params = parse(stored)?.params;
  return !params || params.N !== current.N || params.r !== current.r || params.p !== current.p;
}

const dummies = new Map<number, Promise<string>>();
/**
 * A hash of these parameters to compare against when the user does not exist, so the
 * time a login takes does not tell whether the account does (made once per N).
 */
export function dummyHash(params: ScryptParams): Promise<string> {
  let hash = dummies.get(params.N);
  if (!hash) {
    hash = hashPassword(randomBytes(16).toString("hex"), params);
    dummies.set(params.N, hash);
  }
  return hash;
}
