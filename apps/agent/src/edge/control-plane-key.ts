import type { KeyObject } from "node:crypto";
import { readFileSync } from "node:fs";
import { generateEd25519, publicKeyFromPem } from "@doppio/access-token";
import type { Logger } from "pino";
import type { DecideDeps } from "./decide.ts";

/**
 * The control plane's Ed25519 public key, which verifies hand-off tokens: read from a PEM
 * file when configured, then replaced by the one every heartbeat answer carries.
 */
export class ControlPlaneKey {
  #key: KeyObject;
  #pem: string | null = null;

  constructor(keyFile?: string) {
    // Until a key arrives (file or first heartbeat), a throwaway key makes every hand-off
    // fail verification: private URLs stay closed rather than open.
    this.#key = keyFile ? publicKeyFromPem(readFileSync(keyFile, "utf8")) : generateEd25519().publicKey;
  }

  get key(): KeyObject {
    return this.#key;
  }

  /** Takes the key of a heartbeat answer; one that is not a PEM public key is logged and ignored. */
  update(pem: string | null | undefined, log: Logger): void {
    if (!pem || pem === this.#pem) return;
    try {
      this.#key = publicKeyFromPem(pem);
      this.#pem = pem;
      log.info("control plane access key loaded from heartbeat");
    } catch (err) {
      log.error({ err }, "heartbeat carried an access key that is not a PEM public key");
    }
  }
}

/** The control plane's sign-in hand-off (`GET /api/v1/access/open?host=&next=`) for one request. */
export function signInRedirect(signInUrl: string): NonNullable<DecideDeps["signInUrl"]> {
  return ({ host, uri }) => {
    const u = new URL(signInUrl);
    u.searchParams.set("host", host);
    u.searchParams.set("next", uri);
    return u.toString();
  };
}
