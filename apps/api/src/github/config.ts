import { readFileSync } from "node:fs";
import { DEFAULT_GITHUB_WEB_URL, githubWebUrlProblem } from "@doppio/contracts";
import { z } from "zod";

/**
 * The GitHub App this control plane acts as (README, "GitHub"). Each secret is given either
 * inline (an environment variable) or as a file path; at start the control plane seals them
 * into the database (github/store.ts), where every replica reads them.
 */
export const GitHubConfig = z
  .strictObject({
    appId: z.coerce.number().int().positive(),
    /** The app's URL name: https://github.com/apps/<slug>. */
    appSlug: z.string().regex(/^[a-z0-9][a-z0-9-]{0,98}$/),
    clientId: z.string().min(1).max(100),
    clientSecret: z.string().min(1).optional(),
    clientSecretFile: z.string().optional(),
    /** The app's private key, PEM (PKCS#1 as GitHub issues it, or PKCS#8). */
    privateKey: z.string().min(1).optional(),
    privateKeyFile: z.string().optional(),
    webhookSecret: z.string().min(1).optional(),
    webhookSecretFile: z.string().optional(),
    /** Key that seals secrets at rest: base64 of 32 random bytes (`openssl rand -base64 32`). */
    secretsKey: z.string().min(1).optional(),
    secretsKeyFile: z.string().optional(),
    /** GitHub's web and API origins; GitHub Enterprise Server: https://HOST and https://HOST/api/v3. */
    /** Boxes get it too (their Git credential helper answers for it): an origin only. */
    webUrl: z
      .string()
      .url()
      .default(DEFAULT_GITHUB_WEB_URL)
      .transform((url, ctx) => {
        // URL's origin: lower-case host, no default port, no trailing slash.
        const u = new URL(url);
        const extra = u.pathname !== "/" || u.search || u.hash || u.username || u.password;
        const problem = extra
          ? "GitHub's web URL is an origin, without a path"
          : githubWebUrlProblem(u.origin);
        if (problem) {
          ctx.addIssue({ code: "custom", message: problem });
          return z.NEVER;
        }
        return u.origin;
      }),
    apiUrl: z.string().url().default("https://api.github.com"),
  })
  .superRefine((c, issue) => {
    for (const name of ["clientSecret", "privateKey", "webhookSecret", "secretsKey"] as const) {
      const inline = c[name] !== undefined;
      const file = c[`${name}File`] !== undefined;
      if (inline === file) {
        issue.addIssue({
          code: "custom",
          path: [name],
          message: `give exactly one of ${name} or ${name}File`,
        });
      }
    }
  });
export type GitHubConfig = z.infer<typeof GitHubConfig>;

/** Environment variables for the `github` section (each overrides the YAML file's value). */
const GITHUB_ENV_KEYS: Record<string, keyof GitHubConfig> = {
  DOPPIO_GITHUB_APP_ID: "appId",
  DOPPIO_GITHUB_APP_SLUG: "appSlug",
  DOPPIO_GITHUB_CLIENT_ID: "clientId",
  DOPPIO_GITHUB_CLIENT_SECRET: "clientSecret",
  DOPPIO_GITHUB_CLIENT_SECRET_FILE: "clientSecretFile",
  DOPPIO_GITHUB_PRIVATE_KEY: "privateKey",
  DOPPIO_GITHUB_PRIVATE_KEY_FILE: "privateKeyFile",
  DOPPIO_GITHUB_WEBHOOK_SECRET: "webhookSecret",
  DOPPIO_GITHUB_WEBHOOK_SECRET_FILE: "webhookSecretFile",
  DOPPIO_SECRETS_KEY: "secretsKey",
  DOPPIO_SECRETS_KEY_FILE: "secretsKeyFile",
  DOPPIO_GITHUB_WEB_URL: "webUrl",
  DOPPIO_GITHUB_API_URL: "apiUrl",
};

/** The `github` section from the environment, or undefined when no variable names it. */
export function githubFromEnv(env: NodeJS.ProcessEnv): Record<string, string> | undefined {
  const out: Record<string, string> = {};
  for (const [key, field] of Object.entries(GITHUB_ENV_KEYS)) {
    const value = env[key];
    if (value !== undefined && value !== "") out[field] = value;
  }
  return Object.keys(out).length > 0 ? out : undefined;
}

export interface GitHubSecrets {
  clientSecret: string;
  privateKey: string;
  webhookSecret: string;
  secretsKey: string;
}

/** Each secret's value, read from its file when it was given as one. */
export function readGitHubSecrets(c: GitHubConfig): GitHubSecrets {
  const pick = (inline: string | undefined, file: string | undefined) =>
    inline ?? readFileSync(file!, "utf8").trim();
  return {
    clientSecret: pick(c.clientSecret, c.clientSecretFile),
    privateKey: pick(c.privateKey, c.privateKeyFile),
    webhookSecret: pick(c.webhookSecret, c.webhookSecretFile),
    secretsKey: pick(c.secretsKey, c.secretsKeyFile),
  };
}
