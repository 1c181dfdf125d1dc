import { createCipheriv, createDecipheriv, createHmac, randomBytes, timingSafeEqual } from "node:crypto";

/**
 * Secrets the control plane must read back (a GitHub App's private key, OAuth client and
 * webhook secrets, users' GitHub tokens) are kept in the database sealed: AES-256-GCM under
 * a key from the configuration, never in it. The `purpose` (table, column and row) is bound
 * in as associated data, so a sealed value copied into another row or column does not open.
 */
export class SecretBox {
  readonly #key: Buffer;

  constructor(key: Buffer) {
    if (key.length !== 32) throw new Error("the secrets key must be 32 bytes (base64 of 32 random bytes)");
    this.#key = Buffer.from(key);
  }

  /** From the configuration's base64 text (a file's content or an environment variable). */
  static fromBase64(text: string): SecretBox {
    return new SecretBox(Buffer.from(text.trim(), "base64"));
  }

  seal(plain: string, purpose: string): string {
    const nonce = randomBytes(12);
    const cipher = createCipheriv("aes-256-gcm", this.#key, nonce);
    cipher.setAAD(Buffer.from(purpose));
    const body = Buffer.concat([cipher.update(plain, "utf8"), cipher.final()]);
    return ["v1", nonce, body, cipher.getAuthTag()]
      .map((p) => (typeof p === "string" ? p : p.toString("base64url")))
      .join(".");
  }

  /** The plain text, or an error when it was sealed under another key or purpose, or altered. */
  open(sealed: string, purpose: string): string {
    const [version, nonce, body, tag, ...rest] = sealed.split(".");
    if (version !== "v1" || !nonce || body === undefined || !tag || rest.length > 0) {
      throw new Error("not a sealed value");
    }
    const decipher = createDecipheriv("aes-256-gcm", this.#key, Buffer.from(nonce, "base64url"));
    decipher.setAAD(Buffer.from(purpose));
    decipher.setAuthTag(Buffer.from(tag, "base64url"));
    return Buffer.concat([decipher.update(Buffer.from(body, "base64url")), decipher.final()]).toString(
      "utf8",
    );
  }

  /** An HMAC-SHA256 under a key derived for `purpose` (signed states that travel through GitHub). */
  mac(data: string, purpose: string): string {
    const derived = createHmac("sha256", this.#key).update(`mac:${purpose}`).digest();
    return createHmac("sha256", derived).update(data).digest("base64url");
  }

  verifyMac(data: string, mac: string, purpose: string): boolean {
    const expected = Buffer.from(this.mac(data, purpose));
    const given = Buffer.from(mac);
    return expected.length === given.length && timingSafeEqual(expected, given);
  }
}
