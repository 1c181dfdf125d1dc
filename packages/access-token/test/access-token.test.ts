import { createSecretKey, randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { generateEd25519, hostKey, mint, sign, verify } from "../src/index.ts";

const NOW = Date.UTC(2026, 0, 1, 12, 0, 0);
const claims = { sub: "brisk-falcon-3f9a", usr: "user-1", aud: "code" as const };

describe("access tokens (Ed25519)", () => {
  const { privateKey, publicKey } = generateEd25519();

  it("round-trips claims and honours the injected clock", () => {
    const token = mint(privateKey, claims, 60, NOW);
    const ok = verify(publicKey, token, NOW + 59_000, { sub: claims.sub, aud: "code", usr: "user-1" });
    expect(ok).toEqual({ ok: true, claims: { ...claims, exp: NOW / 1000 + 60, jti: expect.any(String) } });
    expect(mint(privateKey, claims, 60, NOW)).not.toBe(token);
    expect(verify(publicKey, token, NOW + 60_000)).toEqual({ ok: false, reason: "expired" });
  });

  it("names the failed expectation", () => {
    const token = mint(privateKey, claims, 60, NOW);
    expect(verify(publicKey, token, NOW, { sub: "other-box" })).toEqual({
      ok: false,
      reason: "wrong_subject",
    });
    expect(verify(publicKey, token, NOW, { aud: "site" })).toEqual({ ok: false, reason: "wrong_audience" });
    expect(verify(publicKey, token, NOW, { usr: "user-2" })).toEqual({ ok: false, reason: "wrong_user" });
  });

  it("rejects tampered, foreign-key and garbled tokens", () => {
    const token = mint(privateKey, claims, 60, NOW);
    const [, sig] = token.split(".");
    const forged = `${Buffer.from(JSON.stringify({ ...claims, usr: "attacker", exp: NOW / 1000 + 60 })).toString("base64url")}.${sig}`;
    expect(verify(publicKey, forged, NOW)).toEqual({ ok: false, reason: "bad_signature" });
    expect(verify(generateEd25519().publicKey, token, NOW)).toEqual({ ok: false, reason: "bad_signature" });
    for (const garbage of ["", "abc", "a.b.c", "!!.??", `${token}x!`]) {
      expect(verify(publicKey, garbage, NOW)).toEqual({ ok: false, reason: "malformed" });
    }
  });

  it("binds a token to one box host and carries the sign-in it descends from", () => {
    const token = mint(
      privateKey,
      { ...claims, hst: hostKey({ kind: "dev", port: 5173 }), sid: "s1" },
      60,
      NOW,
    );
    const ok = verify(publicKey, token, NOW, { hst: "dev:5173" });
    expect(ok.ok && ok.claims).toMatchObject({ hst: "dev:5173", sid: "s1" });
    expect(verify(publicKey, token, NOW, { hst: hostKey({ kind: "code" }) })).toEqual({
      ok: false,
      reason: "wrong_host",
    });
  });

  it("accepts only the canonical spelling of a signature", () => {
    const token = mint(privateKey, claims, 60, NOW);
    // 64 bytes take 86 base64url characters; the last one carries 2 spare bits.
    const last = token.at(-1)!;
    const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    const respelled = `${token.slice(0, -1)}${alphabet[alphabet.indexOf(last) ^ 1]}`;
    expect(Buffer.from(respelled.split(".")[1]!, "base64url")).toEqual(
      Buffer.from(token.split(".")[1]!, "base64url"),
    );
    expect(verify(publicKey, respelled, NOW)).toEqual({ ok: false, reason: "malformed" });
  });

  it("refuses to sign claims that could not be verified later", () => {
    expect(() => sign(privateKey, { ...claims, aud: "admin" as never, exp: 1 })).toThrow(TypeError);
    expect(() => sign(privateKey, { ...claims, exp: 1.5 })).toThrow(TypeError);
  });
});

describe("access tokens (HMAC secret key)", () => {
  const secret = createSecretKey(randomBytes(32));

  it("round-trips and rejects another secret", () => {
    const token = mint(secret, claims, 3600, NOW);
    expect(verify(secret, token, NOW).ok).toBe(true);
    expect(verify(createSecretKey(randomBytes(32)), token, NOW)).toEqual({
      ok: false,
      reason: "bad_signature",
    });
  });

  it("an HMAC token is not accepted by an Ed25519 verifier (the key picks the algorithm)", () => {
    const token = mint(secret, claims, 3600, NOW);
    expect(verify(generateEd25519().publicKey, token, NOW)).toEqual({ ok: false, reason: "bad_signature" });
  });
});
