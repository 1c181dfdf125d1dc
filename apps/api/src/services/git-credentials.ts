import { type GitCredential, GitCredential as GitCredentialSchema } from "@doppio/contracts";
import { eq } from "drizzle-orm";
import type { Ctx } from "../context.ts";
import { boxes, users } from "../db/schema.ts";
import { AppError, notFound } from "../errors.ts";
import { audit } from "./audit.ts";
import type { BoxRow } from "./box-view.ts";
import { liveBoxOnServer } from "./boxes.ts";

type UserRow = typeof users.$inferSelect;

/**
 * Where short-lived Git credentials come from (the GitHub integration plugs in here, e.g.
 * GitHub App installation tokens for the owner's connected account). `null` means none can
 * be issued for this box; the box's Git then falls back to prompting.
 */
export interface GitCredentialSource {
  issue(req: { box: BoxRow; owner: UserRow }): Promise<GitCredential | null>;
}

/** Until an integration is configured: nothing to issue. */
export const noGitCredentials: GitCredentialSource = {
  async issue() {
    return null;
  },
};

/**
 * A credential for the live box `slug` on server `serverId`. Another server's box and a
 * missing box answer the same 404; so does a box whose owner has nothing to issue from.
 */
export async function issueGitCredential(ctx: Ctx, serverId: string, slug: string): Promise<GitCredential> {
  const [row] = await ctx.db
    .select({ box: boxes, owner: users })
    .from(boxes)
    .innerJoin(users, eq(users.id, boxes.ownerId))
    .where(liveBoxOnServer(serverId, slug));
  if (!row) throw notFound(`box "${slug}"`);
  const issued = await ctx.gitCredentials.issue({ box: row.box, owner: row.owner });
  if (!issued) {
    throw new AppError("not_found", "GitHub is not connected for this box's owner");
  }
  const parsed = GitCredentialSchema.safeParse(issued);
  if (!parsed.success) {
    // A broken integration must not hand a box something Git cannot use (or leak it in an error).
    ctx.log.error(
      { slug, issues: parsed.error.issues.map((i) => i.path.join(".")) },
      "git credential source returned an invalid credential",
    );
    throw new AppError("unavailable", "the Git credential source returned an unusable credential");
  }
  await audit(ctx, ctx.db, {
    server: serverId,
    action: "git_credential.issue",
    targetType: "box",
    targetId: row.box.id,
    data: { slug, owner: row.owner.id, username: parsed.data.username, expiresAt: parsed.data.expiresAt },
  });
  return parsed.data;
}
