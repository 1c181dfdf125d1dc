import { chmodSync, mkdirSync } from "node:fs";
import path from "node:path";
import Database from "better-sqlite3";

export type Db = Database.Database;

/**
 * Ordered migrations; `PRAGMA user_version` records how many ran. Append only: a shipped
 * migration never changes, a new one goes at the end.
 */
const MIGRATIONS: string[] = [
  `
  CREATE TABLE jobs (
    id          TEXT PRIMARY KEY,
    action      TEXT NOT NULL,
    box         TEXT,
    payload     TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('queued', 'running', 'done')),
    attempt     INTEGER NOT NULL DEFAULT 0,
    cp_attempt  INTEGER NOT NULL DEFAULT 0,
    last_seq    INTEGER NOT NULL DEFAULT 0,
    local       INTEGER NOT NULL DEFAULT 0,
    ok          INTEGER,
    error       TEXT,
    received_at TEXT NOT NULL,
    finished_at TEXT
  );
  CREATE INDEX jobs_status ON jobs (status);
  CREATE TABLE outbox (
    job_id    TEXT NOT NULL REFERENCES jobs (id),
    seq       INTEGER NOT NULL,
    event     TEXT NOT NULL,
    delivered INTEGER NOT NULL DEFAULT 0 CHECK (delivered IN (0, 1, 2)),
    PRIMARY KEY (job_id, seq)
  );
  CREATE INDEX outbox_pending ON outbox (delivered, job_id, seq);
  CREATE TABLE ip_allocations (
    ip           TEXT PRIMARY KEY,
    ip_num       INTEGER NOT NULL UNIQUE,
    slug         TEXT NOT NULL UNIQUE,
    allocated_at TEXT NOT NULL
  );
  CREATE TABLE boxes (
    slug          TEXT PRIMARY KEY,
    desired_state TEXT NOT NULL CHECK (desired_state IN ('running', 'stopped')),
    spec          TEXT NOT NULL,
    ip            TEXT NOT NULL,
    mac           TEXT NOT NULL,
    tap           TEXT,
    generation    INTEGER NOT NULL DEFAULT 0,
    updated_at    TEXT NOT NULL
  );
  `,
  // The sha256 of the box's current metadata-service bearer (new on every boot); the
  // token itself is only in the guest's metadata.
  `
  ALTER TABLE boxes ADD COLUMN metadata_token_sha256 TEXT;
  CREATE UNIQUE INDEX boxes_metadata_token ON boxes (metadata_token_sha256);
  `,
  // The edge's memory across restarts (store/edge-access.ts): spent hand-off tokens and
  // signed-out control-plane sessions, each until its tokens or cookies have expired.
  `
  CREATE TABLE edge_spent_handoffs (
    jti TEXT PRIMARY KEY,
    exp INTEGER NOT NULL
  );
  CREATE TABLE edge_ended_sessions (
    sid   TEXT PRIMARY KEY,
    until INTEGER NOT NULL
  );
  `,
  // The job that first recorded the box: a create that fails undoes only a box it made
  // itself (a retry of that job included), never one that existed before it.
  `
  ALTER TABLE boxes ADD COLUMN created_by_job TEXT;
  `,
  // The control plane's delivery attempt was recorded but never read.
  `
  ALTER TABLE jobs DROP COLUMN cp_attempt;
  `,
  // The warm pool (pool/parked.ts): clones restored ahead of demand under a pool slug.
  // `filling` rows were being made (a restart discards them), `ready` ones wait, `claimed`
  // ones are being handed to box `box`; a row goes away once its box is ready.
  `
  CREATE TABLE parked_vms (
    slug          TEXT PRIMARY KEY,
    template      TEXT NOT NULL,
    disk_gb       INTEGER NOT NULL,
    state         TEXT NOT NULL CHECK (state IN ('filling', 'ready', 'claimed')),
    ip            TEXT,
    token_sha256  TEXT UNIQUE,
    generation    INTEGER NOT NULL,
    box           TEXT UNIQUE,
    created_at    TEXT NOT NULL,
    claimed_at    TEXT
  );
  CREATE INDEX parked_vms_ready ON parked_vms (state, template, disk_gb, created_at);
  `,
  // Warm pool: `retiring` rows are surplus clones being removed after the pool size was
  // lowered (no claim takes them; a restart finishes removing them). SQLite cannot change a
  // CHECK constraint in place, so the table is rebuilt.
  `
  CREATE TABLE parked_vms_next (
    slug          TEXT PRIMARY KEY,
    template      TEXT NOT NULL,
    disk_gb       INTEGER NOT NULL,
    state         TEXT NOT NULL CHECK (state IN ('filling', 'ready', 'claimed', 'retiring')),
    ip            TEXT,
    token_sha256  TEXT UNIQUE,
    generation    INTEGER NOT NULL,
    box           TEXT UNIQUE,
    created_at    TEXT NOT NULL,
    claimed_at    TEXT
  );
  INSERT INTO parked_vms_next
    SELECT slug, template, disk_gb, state, ip, token_sha256, generation, box, created_at, claimed_at
    FROM parked_vms;
  DROP TABLE parked_vms;
  ALTER TABLE parked_vms_next RENAME TO parked_vms;
  CREATE INDEX parked_vms_ready ON parked_vms (state, template, disk_gb, created_at);
  `,
];

export const SCHEMA_VERSION = MIGRATIONS.length;

/** Opens (creating) the agent's one SQLite file in WAL mode and brings its schema up to date. */
export function openStore(dataDir: string): Db {
  mkdirSync(dataDir, { recursive: true });
  const file = path.join(dataDir, "agent.sqlite");
  const db = new Database(file);
  // It holds per-box secrets (DB passwords, machine ids): owner-only.
  chmodSync(file, 0o600);
  db.pragma("journal_mode = WAL");
  db.pragma("synchronous = FULL");
  db.pragma("foreign_keys = ON");
  db.pragma("busy_timeout = 5000");
  migrate(db);
  return db;
}

function migrate(db: Db): void {
  const current = db.pragma("user_version", { simple: true }) as number;
  if (current > MIGRATIONS.length) {
    throw new Error(`agent store schema ${current} is newer than this agent (${MIGRATIONS.length})`);
  }
  for (let v = current; v < MIGRATIONS.length; v++) {
    db.transaction(() => {
      db.exec(MIGRATIONS[v]!);
      db.pragma(`user_version = ${v + 1}`);
    })();
  }
}
