import { eq } from "drizzle-orm";
import { SecretBox } from "../auth/sealed.ts";
import type { Clock } from "../context.ts";
import type { Db } from "../db/client.ts";
import { githubApp } from "../db/schema.ts";
import { type GitHubConfig, readGitHubSecrets } from "./config.ts";

const ROW = "app";

/** The app as the running control plane uses it: secrets opened from the database. */
export interface GitHubAppSettings {
  appId: number;
  appSlug: string;
  clientId: string;
  clientSecret: string;
  privateKey: string;
  webhookSecret: string;
  /** GitHub's web origin (OAuth, install pages) and REST API base, without a trailing slash. */
  webUrl: string;
  apiUrl: string;
  /** Seals users' GitHub tokens and OAuth verifiers; signs install states. */
  box: SecretBox;
}

const purpose = (column: string) => `github_app.${column}.${ROW}`;
const trim = (url: string) => url.replace(/\/+$/, "");

/**
 * Writes the configured app into the database with its secrets sealed, then reads it back
 * the way every replica does (so a replica needs only the secrets key, not the PEM file).
 */
export async function loadGitHubApp(db: Db, clock: Clock, config: GitHubConfig): Promise<GitHubAppSettings> {
  const secrets = readGitHubSecrets(config);
  const box = SecretBox.fromBase64(secrets.secretsKey);
  const row = {
    id: ROW,
    appId: config.appId,
    appSlug: config.appSlug,
    clientId: config.clientId,
    webUrl: trim(config.webUrl),
    apiUrl: trim(config.apiUrl),
    privateKeySealed: box.seal(secrets.privateKey, purpose("private_key")),
    clientSecretSealed: box.seal(secrets.clientSecret, purpose("client_secret")),
    webhookSecretSealed: box.seal(secrets.webhookSecret, purpose("webhook_secret")),
    updatedAt: clock.now(),
  };
  await db.insert(githubApp).values(row).onConflictDoUpdate({ target: githubApp.id, set: row });
  return readGitHubApp(db, box);
}

async function readGitHubApp(db: Db, box: SecretBox): Promise<GitHubAppSettings> {
  const [row] = await db.select().from(githubApp).where(eq(githubApp.id, ROW));
  if (!row) throw new Error("no GitHub App is configured");
  return {
    appId: row.appId,
    appSlug: row.appSlug,
    clientId: row.clientId,
    webUrl: row.webUrl,
    apiUrl: row.apiUrl,
    privateKey: box.open(row.privateKeySealed, purpose("private_key")),
    clientSecret: box.open(row.clientSecretSealed, purpose("client_secret")),
    webhookSecret: box.open(row.webhookSecretSealed, purpose("webhook_secret")),
    box,
  };
}
