import { createHmac, timingSafeEqual } from "node:crypto";
import { eq } from "drizzle-orm";
import { z } from "zod";
import type { Ctx } from "../context.ts";
import { githubAccounts, githubDeliveries } from "../db/schema.ts";
import { AppError } from "../errors.ts";
import { audit } from "../services/audit.ts";
import {
  addRepos,
  markRemoved,
  removeRepos,
  replaceRepos,
  setSuspended,
  upsertInstallation,
} from "./installations.ts";
import type { GitHub } from "./service.ts";

/** `X-Hub-Signature-256` is `sha256=` + HMAC-SHA256(webhook secret, raw body) in hex. */
function verifySignature(secret: string, body: Buffer, header: string | undefined): boolean {
  if (!header?.startsWith("sha256=")) return false;
  const given = Buffer.from(header.slice("sha256=".length), "hex");
  const expected = createHmac("sha256", secret).update(body).digest();
  return given.length === expected.length && timingSafeEqual(given, expected);
}

// Only the fields used, as GitHub's webhook payloads name them (@octokit/openapi-webhooks-types).
const Account = z.object({ login: z.string(), id: z.number().int(), type: z.string() });
const Installation = z.object({
  id: z.number().int(),
  account: Account,
  repository_selection: z.enum(["all", "selected"]),
  suspended_at: z.string().nullable().optional(),
});
const Repo = z.object({ id: z.number().int(), full_name: z.string(), private: z.boolean() });
const Sender = z.object({ id: z.number().int(), login: z.string() });

const InstallationEvent = z.object({
  action: z.string(),
  installation: Installation,
  repositories: z.array(Repo).optional(),
});
const InstallationReposEvent = z.object({
  action: z.enum(["added", "removed"]),
  installation: Installation,
  repositories_added: z.array(Repo),
  repositories_removed: z.array(z.object({ id: z.number().int() })),
});
const AuthorizationEvent = z.object({ action: z.literal("revoked"), sender: Sender });

const EVENTS = {
  installation: InstallationEvent,
  installation_repositories: InstallationReposEvent,
  github_app_authorization: AuthorizationEvent,
} as const;

const repoInfo = (r: z.infer<typeof Repo>) => ({ id: r.id, fullName: r.full_name, private: r.private });
const installInfo = (i: z.infer<typeof Installation>) => ({
  id: i.id,
  account: i.account,
  repositorySelection: i.repository_selection,
  suspended: i.suspended_at != null,
});

export type WebhookOutcome = "handled" | "ignored" | "duplicate";

/**
 * One delivery: signature checked over the raw bytes first, then de-duplicated by its
 * delivery id (a redelivery changes nothing), then applied in one transaction.
 */
export async function handleWebhook(
  ctx: Ctx,
  gh: GitHub,
  req: {
    body: Buffer;
    signature: string | undefined;
    event: string | undefined;
    delivery: string | undefined;
  },
): Promise<WebhookOutcome> {
  if (!verifySignature(gh.app.webhookSecret, req.body, req.signature)) {
    throw new AppError("unauthorized", "bad or missing X-Hub-Signature-256");
  }
  if (!req.event || !req.delivery || req.delivery.length > 100) {
    throw new AppError("bad_request", "X-GitHub-Event and X-GitHub-Delivery are required");
  }
  let payload: unknown;
  try {
    payload = JSON.parse(req.body.toString("utf8"));
  } catch {
    throw new AppError("bad_request", "the body is not JSON");
  }
  const event = req.event;
  const delivery = req.delivery;
  const schema = EVENTS[event as keyof typeof EVENTS];
  const parsed = schema?.safeParse(payload);
  if (parsed && !parsed.success)
    throw new AppError("bad_request", `not a ${event} payload GitHub would send`);
  let forget: number | null = null;
  const outcome = await ctx.db.transaction(async (tx): Promise<WebhookOutcome> => {
    const fresh = await tx
      .insert(githubDeliveries)
      .values({ id: delivery, event, receivedAt: ctx.clock.now() })
      .onConflictDoNothing()
      .returning({ id: githubDeliveries.id });
    if (fresh.length === 0) return "duplicate";

    if (event === "installation") {
      const p = InstallationEvent.parse(parsed?.data);
      const inst = installInfo(p.installation);
      forget = inst.id;
      switch (p.action) {
        case "deleted":
          await upsertInstallation(ctx, tx, inst);
          await markRemoved(ctx, tx, inst.id);
          break;
        case "suspend":
        case "unsuspend":
          await upsertInstallation(ctx, tx, inst);
          await setSuspended(ctx, tx, inst.id, p.action === "suspend");
          break;
        default:
          await upsertInstallation(ctx, tx, inst);
          if (p.repositories) await replaceRepos(tx, inst.id, p.repositories.map(repoInfo));
      }
    } else if (event === "installation_repositories") {
      const p = InstallationReposEvent.parse(parsed?.data);
      const inst = installInfo(p.installation);
      forget = inst.id;
      await upsertInstallation(ctx, tx, inst);
      await addRepos(tx, inst.id, p.repositories_added.map(repoInfo));
      await removeRepos(
        tx,
        inst.id,
        p.repositories_removed.map((r) => r.id),
      );
    } else if (event === "github_app_authorization") {
      const p = AuthorizationEvent.parse(parsed?.data);
      // The user revoked the app's authorization: their token is dead, and so is the link.
      const gone = await tx
        .delete(githubAccounts)
        .where(eq(githubAccounts.githubId, p.sender.id))
        .returning({ userId: githubAccounts.userId });
      for (const { userId } of gone) {
        await audit(ctx, tx, {
          action: "github.authorization_revoked",
          targetType: "user",
          targetId: userId,
          data: { githubId: p.sender.id, login: p.sender.login },
        });
      }
    } else {
      return "ignored";
    }
    return "handled";
  });
  if (forget !== null) gh.credentials.forget(forget);
  return outcome;
}
