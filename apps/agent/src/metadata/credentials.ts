import type { GitCredential } from "@doppio/contracts";
import type { Clock } from "../clock.ts";
import type { ControlPlane, GitCredentialAnswer } from "../control-plane.ts";

/** A credential is reused until this long before it expires. */
export const REUSE_MARGIN_MS = 60_000;

/**
 * What one box boot may ask of the control plane: this many asks at once, and one more
 * every `ASK_EVERY_MS`. A box's git asks once per credential (an hour's token is reused),
 * plus once after each `erase`; a box asking in a loop (or erasing to ask again) is held
 * here, on its host, before it takes the host's connections to the control plane or the
 * GitHub App's API quota that every user shares.
 */
export const ASK_BURST = 6;
export const ASK_EVERY_MS = 10_000;

/** A boot past its budget: how long until it may ask again. */
interface Refusal {
  retryAfterMs: number;
  /** The first refusal since this boot's last ask (logged once per run of refusals). */
  first: boolean;
}

/** The cache's answer: the control plane's, or a refusal. */
export type CachedCredentialAnswer = GitCredentialAnswer | Refusal;

interface Budget {
  /** Asks left (fractional: it refills continuously). */
  asks: number;
  at: number;
  refused: boolean;
}

/**
 * Git credentials per box boot, fetched from the control plane and reused until shortly
 * before they expire. Keyed by the digest of the box's metadata token, not by slug: a
 * slug can be reused by someone else's box after a delete, a token never is. One ask per
 * boot is in flight at a time (requests arriving meanwhile share its answer), within the
 * boot's budget (`ASK_BURST`).
 */
export class GitCredentialCache {
  readonly #entries = new Map<string, GitCredential>();
  readonly #asking = new Map<string, Promise<GitCredentialAnswer>>();
  readonly #budgets = new Map<string, Budget>();

  constructor(
    private readonly cp: Pick<ControlPlane, "gitCredential">,
    private readonly clock: Clock,
  ) {}

  async get(key: string, slug: string): Promise<CachedCredentialAnswer> {
    const now = this.clock.now().getTime();
    const hit = this.#entries.get(key);
    if (hit && this.#fresh(hit, now)) return { credential: hit };
    const asking = this.#asking.get(key);
    if (asking) return asking;
    if (!this.cp.gitCredential)
      return { unavailable: "this agent cannot ask its control plane for Git credentials" };
    const wait = this.#spend(key, now);
    if (wait) return wait;
    this.#sweep(now);
    const ask = this.#ask(key, slug, now).finally(() => this.#asking.delete(key));
    this.#asking.set(key, ask);
    return ask;
  }

  /**
   * Drops the box boot's credential (its `git credential erase`: git rejected it, e.g.
   * GitHub revoked it after an uninstall), so the next request asks the control plane,
   * which answers why no new one comes. The boot's budget stays as it is.
   */
  forget(key: string): boolean {
    return this.#entries.delete(key);
  }

  get size(): number {
    return this.#entries.size;
  }

  async #ask(key: string, slug: string, now: number): Promise<GitCredentialAnswer> {
    const answer = await this.cp.gitCredential!(slug);
    if ("credential" in answer && this.#fresh(answer.credential, now))
      this.#entries.set(key, answer.credential);
    return answer;
  }

  /** Takes one ask from the boot's budget; when none is left, how long until one is. */
  #spend(key: string, now: number): Refusal | null {
    const b = this.#budgets.get(key) ?? { asks: ASK_BURST, at: now, refused: false };
    b.asks = this.#refilled(b, now);
    b.at = now;
    this.#budgets.set(key, b);
    if (b.asks >= 1) {
      b.asks -= 1;
      b.refused = false;
      return null;
    }
    const first = !b.refused;
    b.refused = true;
    return { retryAfterMs: Math.ceil((1 - b.asks) * ASK_EVERY_MS), first };
  }

  #refilled(b: Budget, now: number): number {
    return Math.min(ASK_BURST, b.asks + Math.max(0, now - b.at) / ASK_EVERY_MS);
  }

  /** Drops expired credentials and full budgets (a full budget is what a new boot gets). */
  #sweep(now: number): void {
    for (const [k, c] of this.#entries) if (!this.#fresh(c, now)) this.#entries.delete(k);
    for (const [k, b] of this.#budgets) if (this.#refilled(b, now) >= ASK_BURST) this.#budgets.delete(k);
  }

  #fresh(c: GitCredential, now: number): boolean {
    return Date.parse(c.expiresAt) - REUSE_MARGIN_MS > now;
  }
}
