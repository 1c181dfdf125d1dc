import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import {
  BOX_STATUSES,
  DESIRED_STATES,
  GOLDEN_STATUSES,
  JOB_ACTIONS,
  JOB_STATUSES,
  SERVER_STATUSES,
} from "@doppio/contracts";
import { PGlite } from "@electric-sql/pglite";
import { sql } from "drizzle-orm";
import { drizzle as drizzlePg } from "drizzle-orm/node-postgres";
import { migrate as migratePg } from "drizzle-orm/node-postgres/migrator";
import { drizzle as drizzlePglite } from "drizzle-orm/pglite";
import { migrate as migratePglite } from "drizzle-orm/pglite/migrator";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { agentJobs, boxes, boxStatus, serverStatus, servers, serverTemplates } from "../src/db/schema.ts";
import { DB_KINDS, type DbKind, dbUnavailable, freshPostgresDatabase } from "./support/control-plane.ts";

const MIGRATIONS = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../drizzle");
/** The box statuses a database could hold before box_status existed (text column): history, not a copy. */
const STATUSES_BEFORE_ENUM = [
  "pending",
  "creating",
  "starting",
  "running",
  "stopping",
  "stopped",
  "resetting",
  "deleting",
  "deleted",
  "error",
];

/** A bare database of `kind` (no migrations applied), migrated by the test from a folder it picks. */
async function bareDatabase(kind: DbKind) {
  if (kind === "pglite") {
    const client = await PGlite.create();
    const db = drizzlePglite(client);
    return {
      migrate: (folder: string) => migratePglite(db, { migrationsFolder: folder }),
      rows: async (q: ReturnType<typeof sql>) => (await db.execute(q)).rows as Record<string, unknown>[],
      close: () => client.close(),
    };
  }
  const database = await freshPostgresDatabase();
  const pool = new pg.Pool({ connectionString: database.url, max: 2 });
  const db = drizzlePg(pool);
  return {
    migrate: (folder: string) => migratePg(db, { migrationsFolder: folder }),
    rows: async (q: ReturnType<typeof sql>) => (await db.execute(q)).rows as Record<string, unknown>[],
    close: async () => {
      await pool.end();
      await database.drop();
    },
  };
}

/** A copy of the committed migrations that stops after `lastTag`, as an older release shipped them. */
function migrationsUpTo(lastTag: string): string {
  const dir = mkdtempSync(path.join(tmpdir(), "doppio-migrations-"));
  cpSync(MIGRATIONS, dir, { recursive: true });
  const journalPath = path.join(dir, "meta", "_journal.json");
  const journal = JSON.parse(readFileSync(journalPath, "utf8")) as { entries: Array<{ tag: string }> };
  const last = journal.entries.findIndex((e) => e.tag === lastTag);
  expect(last).toBeGreaterThanOrEqual(0);
  journal.entries = journal.entries.slice(0, last + 1);
  writeFileSync(journalPath, JSON.stringify(journal));
  return dir;
}

describe("database enums come from the contracts' lists", () => {
  it("declares the schema's enums with exactly the contracts' values", () => {
    expect(boxStatus.enumValues).toEqual([...BOX_STATUSES]);
    expect(boxes.status.enumValues).toEqual([...BOX_STATUSES]);
    expect(boxes.desiredState.enumValues).toEqual([...DESIRED_STATES]);
    expect(agentJobs.action.enumValues).toEqual([...JOB_ACTIONS]);
    expect(agentJobs.status.enumValues).toEqual([...JOB_STATUSES]);
    expect(serverTemplates.status.enumValues).toEqual([...GOLDEN_STATUSES]);
    expect(serverStatus.enumValues).toEqual([...SERVER_STATUSES]);
    expect(servers.status.enumValues).toEqual([...SERVER_STATUSES]);
  });
});

for (const kind of DB_KINDS) {
  const why = dbUnavailable(kind);
  if (why) console.warn(`SKIPPING "box_status migrations [${kind}]": ${why}`);
  describe.skipIf(why !== null)(`box_status in the migrated database [${kind}]`, () => {
    let db: Awaited<ReturnType<typeof bareDatabase>>;
    let older: string;

    beforeAll(async () => {
      db = await bareDatabase(kind);
      older = migrationsUpTo("0004_api_token_expiry");
      // A database as the release before box_status left it, with a box in each status.
      await db.migrate(older);
      await db.rows(sql`INSERT INTO users (id, email, password_hash) VALUES ('u1', 'u@x.test', 'h')`);
      await db.rows(sql`INSERT INTO teams (id, name) VALUES ('t1', 'team')`);
      await db.rows(
        sql`INSERT INTO templates (name, title, description, version, default_size) VALUES ('minimal', 'Minimal', 'd', '1', 'small')`,
      );
      for (const [i, status] of STATUSES_BEFORE_ENUM.entries()) {
        await db.rows(sql`INSERT INTO boxes (id, slug, team_id, owner_id, template, template_version, size,
          vcpu, memory_mb, disk_gb, desired_state, status, status_reason)
          VALUES (${`b${i}`}, ${`box-${i}`}, 't1', 'u1', 'minimal', '1', 'small', 1, 512, 1, 'running',
          ${status}, ${status === "error" ? "disk full" : null})`);
      }
      await db.migrate(MIGRATIONS);
    });
    afterAll(async () => {
      await db?.close();
      if (older) rmSync(older, { recursive: true, force: true });
    });

    it("has the contracts' box statuses, in order, as the enum the committed migrations create", async () => {
      const labels = await db.rows(sql`SELECT e.enumlabel FROM pg_enum e JOIN pg_type t ON t.oid = e.enumtypid
        WHERE t.typname = 'box_status' ORDER BY e.enumsortorder`);
      expect(labels.map((r) => r.enumlabel)).toEqual([...BOX_STATUSES]);
      const [column] = await db.rows(
        sql`SELECT udt_name FROM information_schema.columns WHERE table_name = 'boxes' AND column_name = 'status'`,
      );
      expect(column).toEqual({ udt_name: "box_status" });
    });

    it("keeps every existing box's status and reason through the migration", async () => {
      const rows = await db.rows(
        sql`SELECT slug, status::text AS status, status_reason, error_code FROM boxes ORDER BY id`,
      );
      expect(rows).toEqual(
        STATUSES_BEFORE_ENUM.map((status, i) => ({
          slug: `box-${i}`,
          // "pending" was never assigned by any release; 0006 maps it to what it meant.
          status: status === "pending" ? "creating" : status,
          status_reason: status === "error" ? "disk full" : null,
          error_code: null,
        })),
      );
    });

    it("refuses a status the contracts do not list", async () => {
      // drizzle wraps the database's error; its cause is Postgres's own refusal.
      const refused = db.rows(sql`UPDATE boxes SET status = 'sleeping' WHERE id = 'b0'`);
      await expect(refused).rejects.toMatchObject({
        cause: { message: expect.stringMatching(/invalid input value for enum box_status: "sleeping"/) },
      });
    });
  });
}

/** The server statuses a database could hold before server_status existed (text column): history, not a copy. */
const SERVER_STATUSES_BEFORE_ENUM = [
  "pending",
  "preparing",
  "active",
  "draining",
  "disabled",
  "broken",
  "archived",
];

for (const kind of DB_KINDS) {
  const why = dbUnavailable(kind);
  if (why) console.warn(`SKIPPING "server_status migrations [${kind}]": ${why}`);
  describe.skipIf(why !== null)(`server_status in the migrated database [${kind}]`, () => {
    let db: Awaited<ReturnType<typeof bareDatabase>>;
    let older: string;

    beforeAll(async () => {
      db = await bareDatabase(kind);
      older = migrationsUpTo("0016_warm_pools");
      // A database as the release before server_status left it, with a server in each status;
      // the failed one says why, as a failed play left it.
      await db.migrate(older);
      for (const [i, status] of SERVER_STATUSES_BEFORE_ENUM.entries()) {
        await db.rows(sql`INSERT INTO servers (id, name, domain, status, backend, vcpu, memory_mb, disk_gb,
          agent_token_hash, status_message)
          VALUES (${`s${i}`}, ${`srv-${i}`}, 'boxes.test', ${status}, 'qemu', 4, 4096, 20, ${`hash-${i}`},
          ${status === "broken" ? "Prepare server: Install packages: mirror answered 503" : null})`);
      }
      // One registered without a status: the column's default.
      await db.rows(sql`INSERT INTO servers (id, name, domain, backend, vcpu, memory_mb, disk_gb, agent_token_hash)
        VALUES ('sd', 'srv-default', 'boxes.test', 'qemu', 4, 4096, 20, 'hash-d')`);
      await db.migrate(MIGRATIONS);
    }, 120_000);
    afterAll(async () => {
      await db?.close();
      if (older) rmSync(older, { recursive: true, force: true });
    });

    it("has the contracts' server statuses, in order, as the enum the committed migrations create", async () => {
      const labels = await db.rows(sql`SELECT e.enumlabel FROM pg_enum e JOIN pg_type t ON t.oid = e.enumtypid
        WHERE t.typname = 'server_status' ORDER BY e.enumsortorder`);
      expect(labels.map((r) => r.enumlabel)).toEqual([...SERVER_STATUSES]);
      const [column] = await db.rows(
        sql`SELECT udt_name FROM information_schema.columns WHERE table_name = 'servers' AND column_name = 'status'`,
      );
      expect(column).toEqual({ udt_name: "server_status" });
    });

    it("turns a broken server into error, keeping its message, and every other status as it was", async () => {
      const rows = await db.rows(
        sql`SELECT name, status::text AS status, status_message FROM servers ORDER BY name`,
      );
      expect(rows).toEqual(
        [
          ...SERVER_STATUSES_BEFORE_ENUM.map((status, i) => ({
            name: `srv-${i}`,
            status: status === "broken" ? "error" : status,
            status_message:
              status === "broken" ? "Prepare server: Install packages: mirror answered 503" : null,
          })),
          { name: "srv-default", status: "pending", status_message: null },
        ].sort((a, b) => a.name.localeCompare(b.name)),
      );
    });

    it("keeps the column's default and refuses the old name", async () => {
      await db.rows(sql`INSERT INTO servers (id, name, domain, backend, vcpu, memory_mb, disk_gb, agent_token_hash)
        VALUES ('sn', 'srv-new', 'boxes.test', 'qemu', 4, 4096, 20, 'hash-n')`);
      const [row] = await db.rows(sql`SELECT status::text AS status FROM servers WHERE id = 'sn'`);
      expect(row).toEqual({ status: "pending" });
      const refused = db.rows(sql`UPDATE servers SET status = 'broken' WHERE id = 's0'`);
      await expect(refused).rejects.toMatchObject({
        cause: { message: expect.stringMatching(/invalid input value for enum server_status: "broken"/) },
      });
    });
  });
}
