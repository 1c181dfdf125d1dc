import type { Ctx } from "../context.ts";
import { AppError } from "../errors.ts";
import { audit } from "../services/audit.ts";
import { GitHubRefused } from "./client.ts";
import { connectUser, replaceRepos, upsertInstallation } from "./installations.ts";
import type { GitHub } from "./service.ts";
import { userToken } from "./user-tokens.ts";

/** How long an install link stays good. */
const INSTALL_STATE_TTL_MS = 30 * 60_000;
const PURPOSE = "github.install_state";

/**
 * The app's install page with a signed, expiring `state` naming the user who asked: GitHub
 * hands it back on the setup URL, where it must match the signed-in user.
 */
export function installUrl(ctx: Ctx, gh: GitHub, userId: string): { url: string; expiresAt: string } {
  const expires = ctx.clock.now().getTime() + INSTALL_STATE_TTL_MS;
  const payload = `${userId}.${expires}`;
  const state = `${payload}.${gh.app.box.mac(payload, PURPOSE)}`;
  const url = new URL(`${gh.app.webUrl}/apps/${gh.app.appSlug}/installations/new`);
  url.searchParams.set("state", state);
  return { url: url.toString(), expiresAt: new Date(expires).toISOString() };
}

/** The user the state was made for, when its signature holds and it has not expired. */
function verifyInstallState(ctx: Ctx, gh: GitHub, state: string): string | null {
  const parts = state.split(".");
  if (parts.length !== 3) return null;
  const [userId, expires, mac] = parts as [string, string, string];
  if (!gh.app.box.verifyMac(`${userId}.${expires}`, mac, PURPOSE)) return null;
  if (!/^\d{1,15}$/.test(expires) || Number(expires) <= ctx.clock.now().getTime()) return null;
  return userId;
}

/**
 * The setup URL's visit after an install: the installation id is a claim of the browser,
 * so it counts only when the user's own GitHub token lists it (GitHub's advice for setup
 * URLs). Then the installation and its repositories are recorded and connected to the user.
 */
export async function completeSetup(
  ctx: Ctx,
  gh: GitHub,
  req: { userId: string; state: string; installationId: number },
): Promise<void> {
  if (verifyInstallState(ctx, gh, req.state) !== req.userId) {
    throw new AppError("forbidden", "this install link is not yours or has expired; connect GitHub again");
  }
  const token = await userToken(ctx, gh, req.userId);
  if (!token)
    throw new AppError("conflict", "link your GitHub account first (Sign in with GitHub in settings)");
  try {
    const mine = await gh.api.userInstallationIds(token);
    if (!mine.includes(req.installationId)) {
      throw new AppError("forbidden", "that installation is not one your GitHub account can access");
    }
    const inst = await gh.api.installation(req.installationId);
    const repos = await gh.api.installationRepos(req.installationId);
    await ctx.db.transaction(async (tx) => {
      await upsertInstallation(ctx, tx, inst);
      await replaceRepos(tx, inst.id, repos);
      await connectUser(tx, inst.id, req.userId);
      await audit(ctx, tx, {
        user: req.userId,
        action: "github.installation.connect",
        targetType: "user",
        targetId: req.userId,
        data: { installation: inst.id, account: inst.account.login, repositories: repos.length },
      });
    });
    gh.credentials.forget(inst.id);
  } catch (err) {
    if (err instanceof GitHubRefused) throw new AppError("unavailable", err.message);
    throw err;
  }
}
