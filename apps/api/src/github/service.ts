import type { Ctx } from "../context.ts";
import type { Db } from "../db/client.ts";
import { type GitHubApi, octokitGitHub } from "./client.ts";
import type { GitHubConfig } from "./config.ts";
import { type GitHubAppSettings, loadGitHubApp } from "./store.ts";
import { GitHubCredentialSource } from "./tokens.ts";

/** The GitHub integration as the routes see it: the app, its API client, the token source. */
export interface GitHub {
  app: GitHubAppSettings;
  api: GitHubApi;
  credentials: GitHubCredentialSource;
}

/** Seals the configured app into the database and builds the integration on it. */
export async function startGitHub(
  ctx: Pick<Ctx, "clock" | "log"> & { db: Db },
  config: GitHubConfig,
  api?: (app: GitHubAppSettings) => GitHubApi,
): Promise<GitHub> {
  const app = await loadGitHubApp(ctx.db, ctx.clock, config);
  const client = (api ?? octokitGitHub)(app);
  ctx.log.info({ appId: app.appId, apiUrl: app.apiUrl }, "GitHub App configured");
  return { app, api: client, credentials: new GitHubCredentialSource(ctx, client) };
}
