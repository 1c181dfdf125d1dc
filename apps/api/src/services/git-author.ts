import { DEFAULT_GITHUB_WEB_URL, GitAuthor } from "@doppio/contracts";
import { eq } from "drizzle-orm";
import type { Db } from "../db/client.ts";
import { githubAccounts, users } from "../db/schema.ts";

interface Account {
  email: string;
  name: string | null;
}
interface Linked {
  githubId: number;
  login: string;
}

/**
 * The author a user's boxes commit as (contracts' GitAuthor), or null when nothing valid can
 * be made. With GitHub linked on github.com: their login and GitHub's private noreply address
 * (`ID+login@users.noreply.github.com`, which GitHub attributes to the account without showing
 * an email); GitHub Enterprise Servers have no such address, so there, and without GitHub, the
 * account's own email. The name is the account's name, else the email's local part.
 */
export function gitAuthorOf(account: Account, github: Linked | null, githubWebUrl: string): GitAuthor | null {
  const email =
    github && githubWebUrl === DEFAULT_GITHUB_WEB_URL
      ? `${github.githubId}+${github.login}@users.noreply.github.com`
      : account.email;
  const name = github?.login ?? printable(account.name ?? "") ?? account.email.split("@")[0]!;
  const parsed = GitAuthor.safeParse({ name, email });
  return parsed.success ? parsed.data : null;
}

/** `text` without what a git author name may not hold, trimmed; null when nothing is left. */
function printable(text: string): string | null {
  const clean = text
    .replace(/[\p{Cc}"\\<>]/gu, "")
    .trim()
    .slice(0, 100)
    .trim();
  return clean || null;
}

/** gitAuthorOf for user `userId`, read in `db` (a transaction's, when in one). */
export async function loadGitAuthor(db: Db, userId: string, githubWebUrl: string): Promise<GitAuthor | null> {
  const [row] = await db
    .select({
      email: users.email,
      name: users.name,
      githubId: githubAccounts.githubId,
      login: githubAccounts.login,
    })
    .from(users)
    .leftJoin(githubAccounts, eq(githubAccounts.userId, users.id))
    .where(eq(users.id, userId));
  if (!row) return null;
  const github =
    row.githubId !== null && row.login !== null ? { githubId: row.githubId, login: row.login } : null;
  return gitAuthorOf(row, github, githubWebUrl);
}
