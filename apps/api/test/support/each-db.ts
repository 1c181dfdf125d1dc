import { afterAll, beforeAll, describe } from "vitest";
import type { ApiConfig } from "../../src/config.ts";
import { DB_KINDS, dbUnavailable, startControlPlane, type TestControlPlane } from "./control-plane.ts";

/**
 * Runs one suite against a real control plane on every database kind: embedded PGlite
 * and PostgreSQL. A kind that cannot run here is skipped with the reason printed.
 */
export function describeOnEachDb(
  title: string,
  body: (env: () => TestControlPlane) => void,
  config: Partial<ApiConfig> = {},
): void {
  for (const kind of DB_KINDS) {
    const why = dbUnavailable(kind);
    if (why) console.warn(`SKIPPING "${title}" on ${kind}: ${why}`);
    describe.skipIf(why !== null)(`${title} [${kind}]`, () => {
      let env: TestControlPlane | undefined;
      beforeAll(async () => {
        env = await startControlPlane({ kind, config });
      });
      afterAll(async () => {
        await env?.close();
      });
      body(() => env!);
    });
  }
}
