import type { GitCredential } from "@doppio/contracts";
import type { Ctx } from "../context.ts";
import { AppError } from "../errors.ts";
import { audit } from "../services/audit.ts";
import type { GitCredentialSource } from "../services/git-credentials.ts";
import { type GitHubApi, GitHubRefused } from "./client.ts";
import { usableInstallations, usableRepos } from "./installations.ts";

/** What a box's token may do: push and pull code, nothing else. */
const BOX_TOKEN_PERMISSIONS = { contents: "write" } as const;
/** A cached token is handed out only while it has at least this long left. */
export const TOKEN_REUSE_MARGIN_MS = 10 * 60_000;
/** GitHub's `repositories` parameter takes at most this many names. */
const MAX_REPOS = 500;

interface Cached {
  token: string;
  expiresAt: string;
}

/**
 * Box Git credentials from GitHub App installation tokens. Each request first checks the
 * database (the owner's GitHub account still linked, the installation still installed and
 * not suspended), so a revocation stops new tokens at once even when one is cached. Tokens
 * are scoped to the box's repository, or to the repositories the owner connected from their
 * first installation, with `contents: write` only; cached per scope until
 * `TOKEN_REUSE_MARGIN_MS` before they expire. Each mint and each reuse is audited, without
 * the token.
 */
export class GitHubCredentialSource implements GitCredentialSource {
  readonly #cache = new Map<string, Cached>();

  constructor(
    private readonly ctx: Pick<Ctx, "db" | "clock" | "log">,
    private readonly api: GitHubApi,
  ) {}

  async issue({ box, owner }: Parameters<GitCredentialSource["issue"]>[0]): Promise<GitCredential | null> {
    let installationId: number;
    let repositories: string[];
    if (box.repo) {
      const [repo] = await usableRepos(this.ctx.db, owner.id, box.repo);
      if (!repo) {
        throw new AppError(
          "not_found",
          `GitHub repository ${box.repo} is no longer connected for this box's owner (reconnect it in doppio's settings)`,
        );
      }
      installationId = repo.installationId;
      repositories = [repo.fullName.split("/")[1]!];
    } else {
      const installs = await usableInstallations(this.ctx.db, owner.id);
      const first = installs[0];
      if (!first) return null;
      const repos = (await usableRepos(this.ctx.db, owner.id)).filter((r) => r.installationId === first.id);
      if (repos.length === 0) return null;
      installationId = first.id;
      repositories = repos.slice(0, MAX_REPOS).map((r) => r.fullName.split("/")[1]!);
    }
    repositories.sort();
    const key = `${installationId}:${repositories.join(",")}`;
    const now = this.ctx.clock.now().getTime();
    const cached = this.#cache.get(key);
    let credential: Cached;
    let reused = false;
    if (cached && Date.parse(cached.expiresAt) - now > TOKEN_REUSE_MARGIN_MS) {
      credential = cached;
      reused = true;
    } else {
      this.#cache.delete(key);
      try {
        credential = await this.api.installationToken({
          installationId,
          repositories,
          permissions: { ...BOX_TOKEN_PERMISSIONS },
        });
      } catch (err) {
        if (err instanceof GitHubRefused) {
          this.ctx.log.warn({ installation: installationId, status: err.status }, "GitHub refused a token");
          throw new AppError(
            "unavailable",
            `GitHub refused a token for installation ${installationId} (HTTP ${err.status}); reconnect GitHub in doppio's settings`,
          );
        }
        throw err;
      }
      this.#cache.set(key, credential);
    }
    await audit(this.ctx, this.ctx.db, {
      user: owner.id,
      action: reused ? "github.installation_token.reuse" : "github.installation_token.issue",
      targetType: "box",
      targetId: box.id,
      data: {
        slug: box.slug,
        installation: installationId,
        repositories,
        permissions: BOX_TOKEN_PERMISSIONS,
        expiresAt: credential.expiresAt,
      },
    });
    return { username: "x-access-token", token: credential.token, expiresAt: credential.expiresAt };
  }

  /** Drops cached tokens of an installation (uninstalled, suspended or changed). */
  forget(installationId: number): void {
    for (const key of this.#cache.keys()) {
      if (key.startsWith(`${installationId}:`)) this.#cache.delete(key);
    }
  }
}
