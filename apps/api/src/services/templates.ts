import { TEMPLATES, type Template } from "@doppio/contracts";
import { eq, sql } from "drizzle-orm";
import type { Ctx } from "../context.ts";
import { servers, serverTemplates, templates } from "../db/schema.ts";

type TemplateRow = typeof templates.$inferInsert;

/**
 * The templates users can pick, from the list the agent shares (packages/contracts/src/templates.ts).
 * Versions change when a recipe changes; agents rebuild the golden snapshot of a template
 * whose version moved.
 */
const TEMPLATE_CATALOG: Omit<TemplateRow, "createdAt">[] = TEMPLATES.map((t) => ({
  name: t.name,
  title: t.title,
  description: t.description,
  version: t.version,
  defaultSize: t.boxSize,
  isDefault: t.isDefault,
}));

export async function seedTemplates(ctx: Ctx): Promise<void> {
  for (const t of TEMPLATE_CATALOG) {
    await ctx.db
      .insert(templates)
      .values({ ...t, createdAt: ctx.clock.now() })
      .onConflictDoUpdate({
        target: templates.name,
        set: {
          title: t.title,
          description: t.description,
          version: t.version,
          defaultSize: t.defaultSize,
          isDefault: t.isDefault,
        },
      });
  }
}

export async function getTemplate(ctx: Ctx, name: string) {
  const [row] = await ctx.db.select().from(templates).where(eq(templates.name, name));
  return row ?? null;
}

export async function listTemplates(ctx: Ctx): Promise<Template[]> {
  const rows = await ctx.db
    .select()
    .from(templates)
    .orderBy(sql`${templates.isDefault} DESC`, templates.name);
  const ready = await ctx.db
    .select({ template: serverTemplates.template, version: serverTemplates.version, server: servers.name })
    .from(serverTemplates)
    .innerJoin(servers, eq(servers.id, serverTemplates.serverId))
    .where(eq(serverTemplates.status, "ready"));
  return rows.map((t) => ({
    name: t.name,
    title: t.title,
    description: t.description,
    version: t.version,
    defaultSize: t.defaultSize,
    readyOn: ready.filter((r) => r.template === t.name && r.version === t.version).map((r) => r.server),
  }));
}
