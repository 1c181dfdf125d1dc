import { createAppAuth } from "@octokit/auth-app";
import { Octokit } from "@octokit/core";
import { RequestError } from "@octokit/request-error";
import type { GitHubAppSettings } from "./store.ts";

/** What the control plane asks GitHub, through Octokit (the same calls against GitHub or GHES). */
export interface GitHubApi {
  /** An installation access token limited to `repositories` (names, not `owner/name`) and `permissions`. */
  installationToken(req: {
    installationId: number;
    repositories: string[];
    permissions: Record<string, "read" | "write">;
  }): Promise<{ token: string; expiresAt: string }>;
  /** The installation's account and repository selection, asked as the app (JWT). */
  installation(installationId: number): Promise<InstallationInfo>;
  /** Every repository the installation can reach, asked with an installation token. */
  installationRepos(installationId: number): Promise<RepoInfo[]>;
  /** The OAuth web flow's code exchanged for a user access token (PKCE verifier included). */
  exchangeCode(req: { code: string; redirectUri: string; codeVerifier: string }): Promise<UserToken>;
  /** A refresh token exchanged for a new user token and refresh token (both old ones stop working). */
  refreshUserToken(refreshToken: string): Promise<UserToken>;
  /** The user behind a user access token, and their verified primary email if any. */
  user(token: string): Promise<GitHubUser>;
  /** Installation ids of this app the user can access (proves a user may connect one). */
  userInstallationIds(token: string): Promise<number[]>;
}

export interface InstallationInfo {
  id: number;
  account: { login: string; id: number; type: string };
  repositorySelection: "all" | "selected";
  suspended: boolean;
}
export interface RepoInfo {
  id: number;
  fullName: string;
  private: boolean;
}
/** GitHub's answer to a token request; the lifetimes are seconds, null when tokens do not expire. */
export interface UserToken {
  token: string;
  expiresIn: number | null;
  refreshToken: string | null;
  refreshTokenExpiresIn: number | null;
}

/** GitHub's token endpoint body (https://docs.github.com/en/apps/creating-github-apps/authenticating-with-a-github-app/refreshing-user-access-tokens). */
function userTokenFrom(what: string, data: unknown): UserToken {
  const body = data as {
    access_token?: string;
    expires_in?: number;
    refresh_token?: string;
    refresh_token_expires_in?: number;
    error?: string;
  };
  if (!body.access_token) {
    // GitHub answers 200 with `error` (bad_verification_code, bad_refresh_token, …).
    throw new GitHubRefused(400, `${what}: ${body.error ?? "no access token"}`);
  }
  return {
    token: body.access_token,
    expiresIn: typeof body.expires_in === "number" ? body.expires_in : null,
    refreshToken: body.refresh_token ?? null,
    refreshTokenExpiresIn:
      typeof body.refresh_token_expires_in === "number" ? body.refresh_token_expires_in : null,
  };
}
interface GitHubUser {
  id: number;
  login: string;
  name: string | null;
  /** The primary email when GitHub says it is verified; null otherwise. */
  verifiedPrimaryEmail: string | null;
}

/** A refusal from GitHub that callers turn into a clear message. */
export class GitHubRefused extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
    this.name = "GitHubRefused";
  }
}

async function refusals<T>(what: string, call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (err) {
    if (err instanceof RequestError) {
      // The message GitHub sent, never the request (which carries credentials).
      throw new GitHubRefused(err.status, `${what}: GitHub answered ${err.status}`);
    }
    throw err;
  }
}

export function octokitGitHub(app: GitHubAppSettings): GitHubApi {
  const appAuth = { appId: app.appId, privateKey: app.privateKey };
  const asApp = new Octokit({ authStrategy: createAppAuth, auth: appAuth, baseUrl: app.apiUrl });
  const auth = createAppAuth({ ...appAuth, request: asApp.request });
  const asUser = (token: string) => new Octokit({ auth: token, baseUrl: app.apiUrl });

  return {
    async installationToken({ installationId, repositories, permissions }) {
      return refusals("installation token", async () => {
        // `refresh`: the caller caches (github/tokens.ts) and must see a revocation at once.
        const got = await auth({
          type: "installation",
          installationId,
          repositoryNames: repositories,
          permissions,
          refresh: true,
        });
        return { token: got.token, expiresAt: got.expiresAt };
      });
    },

    async installation(installationId) {
      return refusals("installation", async () => {
        const { data } = await asApp.request("GET /app/installations/{installation_id}", {
          installation_id: installationId,
        });
        const account = data.account;
        const login = account && "login" in account ? account.login : (account?.slug ?? "");
        return {
          id: data.id,
          account: { login, id: Number(account?.id ?? 0), type: data.target_type },
          repositorySelection: data.repository_selection,
          suspended: data.suspended_at != null,
        };
      });
    },

    async installationRepos(installationId) {
      return refusals("installation repositories", async () => {
        const { token } = await auth({ type: "installation", installationId });
        const octokit = asUser(token);
        const out: RepoInfo[] = [];
        for (let page = 1; page <= 10; page++) {
          const { data } = await octokit.request("GET /installation/repositories", { per_page: 100, page });
          out.push(
            ...data.repositories.map((r) => ({
              id: Number(r.id),
              fullName: r.full_name,
              private: r.private,
            })),
          );
          if (data.repositories.length < 100) break;
        }
        return out;
      });
    },

    async exchangeCode({ code, redirectUri, codeVerifier }) {
      return refusals("OAuth code exchange", async () => {
        const { data } = await asApp.request("POST /login/oauth/access_token", {
          baseUrl: app.webUrl,
          headers: { accept: "application/json", authorization: "" },
          client_id: app.clientId,
          client_secret: app.clientSecret,
          code,
          redirect_uri: redirectUri,
          code_verifier: codeVerifier,
        });
        return userTokenFrom("OAuth code exchange", data);
      });
    },

    async refreshUserToken(refreshToken) {
      return refusals("user token refresh", async () => {
        const { data } = await asApp.request("POST /login/oauth/access_token", {
          baseUrl: app.webUrl,
          headers: { accept: "application/json", authorization: "" },
          client_id: app.clientId,
          client_secret: app.clientSecret,
          grant_type: "refresh_token",
          refresh_token: refreshToken,
        });
        return userTokenFrom("user token refresh", data);
      });
    },

    async user(token) {
      return refusals("user", async () => {
        const octokit = asUser(token);
        const { data: user } = await octokit.request("GET /user");
        const { data: emails } = await octokit.request("GET /user/emails", { per_page: 100 });
        const primary = emails.find((e) => e.primary && e.verified);
        return {
          id: Number(user.id),
          login: user.login,
          name: user.name ?? null,
          verifiedPrimaryEmail: primary?.email ?? null,
        };
      });
    },

    async userInstallationIds(token) {
      return refusals("user installations", async () => {
        const { data } = await asUser(token).request("GET /user/installations", { per_page: 100 });
        return data.installations.map((i) => i.id);
      });
    },
  };
}
