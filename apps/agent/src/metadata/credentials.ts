import type { GitCredential } from "@doppio/contracts";
import type { Clock } from "../clock.ts";
import type { ControlPlane, GitCredentialAnswer } from "../control-plane.ts";

/** A credential is reused until this long before it expires. */
export const REUSE_MARGIN_MS = 60_000;

/**
 * Git credentials per box boot, fetched from the control plane and reused until shortly
 * before they expire. Keyed by the digest of the box's metadata token, not by slug: a
 * slug can be reused by someone else's box after a delete, a token never is.
 */
export class GitCredentialCache {
  readonly #entries = new Map<string, GitCredential>();

  constructor(
    private readonly cp: Pick<ControlPlane, "gitCredential">,
    private readonly clock: Clock,
  ) {}

  async get(key: string, slug: string): Promise<GitCredentialAnswer> {
    const now = this.clock.now().getTime();
    const hit = this.#entries.get(key);
    if (hit && this.#fresh(hit, now)) return { credential: hit };
    for (const [k, c] of this.#entries) if (!this.#fresh(c, now)) this.#entries.delete(k);
    if (!this.cp.gitCredential)
      return { unavailable: "this agent cannot ask its control plane for Git credentials" };
    const answer = await this.cp.gitCredential(slug);
    if ("credential" in answer && this.#fresh(answer.credential, now))
      this.#entries.set(key, answer.credential);
    return answer;
  }

  /**
   * Drops the box boot's credential (its `git credential erase`: git rejected it, e.g.
   * GitHub revoked it after an uninstall), so the next request asks the control plane,
   * which answers why no new one comes.
   */
  forget(key: string): boolean {
    return this.#entries.delete(key);
  }

  get size(): number {
    return this.#entries.size;
  }

  #fresh(c: GitCredential, now: number): boolean {
    return Date.parse(c.expiresAt) - REUSE_MARGIN_MS > now;
  }
}
