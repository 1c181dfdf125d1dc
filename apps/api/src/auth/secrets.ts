import { createHash, randomBytes, randomUUID } from "node:crypto";

/** Opaque secrets are stored only as sha256; the raw value is shown once. */
export function sha256(value: string): string {
  return createHash("sha256").update(value).digest("hex");
}

/** `<kind>_<43 chars of base64url>`: 256 bits of randomness with a readable kind prefix. */
export function newSecret(kind: "dpb" | "dps" | "dpa" | "dpv"): string {
  return `${kind}_${randomBytes(32).toString("base64url")}`;
}

export const newId = (): string => randomUUID();
