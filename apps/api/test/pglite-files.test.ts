import { spawnSync } from "node:child_process";
import { chmodSync, mkdtempSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import pino from "pino";
import { afterAll, describe, expect, it } from "vitest";
import { openDatabase } from "../src/db/client.ts";

const asRoot = process.getuid?.() === 0;
if (!asRoot)
  console.warn("SKIPPING the embedded database's file access test: needs root to act as another user");

/**
 * The embedded database (PGlite) writes its files world-readable and writable (0666). On a
 * single-host install other users share the machine, every box's VMM among them (its own
 * uid): its directory must keep them out.
 */
describe.skipIf(!asRoot)("the embedded database's files", () => {
  const dataDir = mkdtempSync(path.join(tmpdir(), "doppio-pglite-"));
  afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

  it("are out of other users' reach, also in a data directory others may enter", async () => {
    chmodSync(dataDir, 0o755); // as a data directory under /var/lib would be
    const db = await openDatabase({ dataDir, log: pino({ level: "silent" }), poolSize: 1 });
    await db.close();
    const pgdata = path.join(dataDir, "pgdata");
    expect(statSync(pgdata).mode & 0o777).toBe(0o700);
    expect(readdirSync(pgdata)).toContain("PG_VERSION");
    // Another user (a box's VMM uid) tries to read and to write the database.
    for (const attempt of [`cat ${pgdata}/PG_VERSION`, `echo x >> ${pgdata}/PG_VERSION`, `ls ${pgdata}`]) {
      const r = spawnSync(
        "setpriv",
        ["--reuid=300077", "--regid=300077", "--clear-groups", "sh", "-c", attempt],
        {
          encoding: "utf8",
        },
      );
      expect(r.status, attempt).not.toBe(0);
      expect(r.stderr, attempt).toMatch(/Permission denied/);
    }
  });
});
