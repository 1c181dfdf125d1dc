import { readFile } from "node:fs/promises";
import { PASSWORD_MAX, PASSWORD_MIN } from "@doppio/contracts";
import { eq } from "drizzle-orm";
import type { Ctx } from "../context.ts";
import { users } from "../db/schema.ts";
import { createAccount } from "./users.ts";

/**
 * The install's administrator comes from configuration and exists before the API listens,
 * so nobody can race the operator for it on a fresh install ("the first signup is admin"
 * let any stranger who got there first own the install). The password file holds the
 * initial password only: once the account exists the file is not read again.
 */
export async function bootstrapAdmin(ctx: Ctx): Promise<void> {
  const { adminEmail, adminPasswordFile } = ctx.config;
  if (Boolean(adminEmail) !== Boolean(adminPasswordFile)) {
    throw new Error("invalid control-plane configuration: set adminEmail and adminPasswordFile together");
  }
  if (!adminEmail || !adminPasswordFile) {
    const [anyAdmin] = await ctx.db
      .select({ id: users.id })
      .from(users)
      .where(eq(users.role, "admin"))
      .limit(1);
    if (!anyAdmin) ctx.log.warn("no administrator: set adminEmail and adminPasswordFile to create one");
    return;
  }
  const [existing] = await ctx.db.select().from(users).where(eq(users.email, adminEmail));
  if (existing) {
    // Whoever registered this address may not be the operator: never promote it silently.
    if (existing.role !== "admin") {
      throw new Error(
        `the configured admin ${adminEmail} already has an ordinary account; configure another adminEmail`,
      );
    }
    return;
  }
  const password = (await readFile(adminPasswordFile, "utf8")).replace(/\r?\n$/, "");
  if (password.length < PASSWORD_MIN || password.length > PASSWORD_MAX) {
    throw new Error(
      `the admin password in ${adminPasswordFile} must be ${PASSWORD_MIN} to ${PASSWORD_MAX} characters (login takes no other)`,
    );
  }
  await createAccount(ctx, { email: adminEmail, password, name: "Admin" }, "admin", { verified: true });
  ctx.log.info({ email: adminEmail }, "administrator created");
}
