import { z } from "zod";

/**
 * GitHub's rules for names: an owner (user or organisation) is 1–39 letters, digits and
 * single hyphens, not at either end; a repository name is 1–100 of letters, digits, `.`,
 * `-`, `_` (and not `.` or `..`). Length is checked before the (linear) pattern.
 */
const OWNER_RE = /^[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}$/;
const REPO_RE = /^[A-Za-z0-9._-]{1,100}$/;

export function repoNameProblem(value: string): string | null {
  if (value.length > 140) return "a repository is owner/name, at most 140 characters";
  const parts = value.split("/");
  if (parts.length !== 2) return "a repository is owner/name";
  const [owner, name] = parts as [string, string];
  if (!OWNER_RE.test(owner)) return "the owner is 1-39 letters, digits or single hyphens";
  if (!REPO_RE.test(name) || name === "." || name === "..") {
    return "the repository name is 1-100 letters, digits, '.', '-' or '_'";
  }
  return null;
}

/** `owner/name` of a GitHub repository. */
export const RepoFullName = z.string().superRefine((value, ctx) => {
  const problem = repoNameProblem(value);
  if (problem) ctx.addIssue({ code: "custom", message: problem });
});

/** GitHub's web origin for a box when none is configured. */
export const DEFAULT_GITHUB_WEB_URL = "https://github.com";

const LABEL = "[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?";
const WEB_URL_RE = new RegExp(`^https?://${LABEL}(?:\\.${LABEL})*(?::([1-9][0-9]{0,4}))?$`);

/**
 * GitHub's web origin as a box is given it (github.com, or a GitHub Enterprise Server):
 * `http(s)://host[:port]`, lower case, no path, user, query or trailing slash. It reaches the
 * guest's shell and gitconfig (images/common/rootfs/usr/lib/doppio/github-url checks it there
 * again), so nothing else passes. IPv6 literals are not accepted.
 */
export function githubWebUrlProblem(value: string): string | null {
  const problem = "GitHub's web URL is http(s)://host[:port] in lower case, without a path";
  if (value.length > 200) return problem;
  const m = WEB_URL_RE.exec(value);
  if (!m || (m[1] !== undefined && Number(m[1]) > 65535)) return problem;
  return null;
}

/** `http(s)://host[:port]` of GitHub's web interface (githubWebUrlProblem). */
export const GitHubWebUrl = z.string().superRefine((value, ctx) => {
  const problem = githubWebUrlProblem(value);
  if (problem) ctx.addIssue({ code: "custom", message: problem });
});

/**
 * Who a box's git commits are by unless its user sets their own (`git config --global`): the
 * name and email the control plane derives from the owner's account (apps/api/src/services/
 * git-author.ts). They reach the guest's gitconfig as quoted values, so no quote, backslash,
 * angle bracket or control character passes (the guest's apply checks again).
 */
export const GitAuthor = z.object({
  name: z.string().regex(/^[^\p{Cc}"\\<>]{1,100}$/u),
  email: z
    .string()
    .max(254)
    .regex(/^[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63})+$/),
});
export type GitAuthor = z.infer<typeof GitAuthor>;

export const GitHubRepo = z.object({
  fullName: z.string(),
  private: z.boolean(),
  installationId: z.number().int(),
});
export type GitHubRepo = z.infer<typeof GitHubRepo>;

export const GitHubInstallation = z.object({
  id: z.number().int(),
  account: z.string(),
  accountType: z.string(),
  repositorySelection: z.enum(["all", "selected"]),
  /** `active`, `suspended` (by its owner on GitHub) or `removed` (uninstalled). */
  state: z.enum(["active", "suspended", "removed"]),
});
export type GitHubInstallation = z.infer<typeof GitHubInstallation>;

/** The signed-in user's GitHub connection, as settings and `doppio github status` show it. */
export const GitHubStatus = z.object({
  /** Whether this control plane has a GitHub App configured at all. */
  configured: z.boolean(),
  /** The app's name on GitHub (its install page is https://github.com/apps/<appSlug>). */
  appSlug: z.string().nullable(),
  account: z
    .object({
      login: z.string(),
      id: z.number().int(),
      linkedAt: z.string(),
      /** Made by signing in with GitHub: it has no password, so it cannot unlink. */
      createdByGithub: z.boolean(),
    })
    .nullable(),
  installations: z.array(GitHubInstallation),
  /** Repositories of active installations: what a box can be created from and push to. */
  repositories: z.array(GitHubRepo),
});
export type GitHubStatus = z.infer<typeof GitHubStatus>;

export const GitHubRepoList = z.object({ repositories: z.array(GitHubRepo) });

export const GitHubConnectRequest = z.strictObject({});
export const GitHubConnect = z.object({
  /** The app's install page on GitHub, with a signed state for this user. */
  url: z.string(),
  expiresAt: z.string(),
});

export const GitHubSignInQuery = z.object({
  /** `login` (anyone) or `link` (the signed-in dashboard user adds GitHub to their account). */
  intent: z.enum(["login", "link"]).default("login"),
});
export const GitHubCallbackQuery = z.object({
  code: z.string().max(512).optional(),
  state: z.string().max(512).optional(),
  error: z.string().max(200).optional(),
});
export const GitHubSetupQuery = z.object({
  installation_id: z.coerce.number().int().positive().max(Number.MAX_SAFE_INTEGER),
  setup_action: z.string().max(50).optional(),
  state: z.string().max(512).default(""),
});

export const GitHubWebhookAck = z.object({ outcome: z.enum(["handled", "ignored", "duplicate"]) });

/** Why a GitHub sign-in or link did not complete (`?github_error=` on the dashboard page it returns to). */
export const GITHUB_SIGNIN_ERRORS = {
  state_invalid: "The sign-in link was stale, used already, or started in another browser. Try again.",
  code_rejected: "GitHub did not accept the sign-in (the code was used or expired). Try again.",
  email_unverified: "Your GitHub account has no verified primary email; verify one on GitHub first.",
  email_taken:
    "An account with your GitHub email exists. Sign in with your password, then link GitHub in settings.",
  already_linked: "That GitHub account is linked to another doppio account.",
  github_unavailable: "GitHub could not be reached. Try again later.",
  not_configured: "GitHub is not configured on this doppiobox.",
} as const;
export type GitHubSignInError = keyof typeof GITHUB_SIGNIN_ERRORS;
