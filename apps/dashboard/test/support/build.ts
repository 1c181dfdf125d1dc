import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { build } from "vite";

const ROOT = path.resolve(import.meta.dirname, "../../../..");

/**
 * Builds the dashboard as it ships into a new temporary directory and returns it (the
 * caller removes it). Vitest sets NODE_ENV=test, which would bundle React's development
 * build, so the build runs with NODE_ENV=production.
 */
export async function buildDashboard(prefix: string): Promise<string> {
  const outDir = await mkdtemp(path.join(tmpdir(), `${prefix}-`));
  const nodeEnv = process.env.NODE_ENV;
  process.env.NODE_ENV = "production";
  try {
    await build({
      configFile: path.join(ROOT, "apps/dashboard/vite.config.ts"),
      logLevel: "warn",
      build: { outDir, emptyOutDir: true, sourcemap: false },
    });
  } finally {
    process.env.NODE_ENV = nodeEnv;
  }
  return outDir;
}
