import {
  BOX_STATUSES,
  DESIRED_STATES,
  GOLDEN_STATUSES,
  JOB_ACTIONS,
  JOB_STATUSES,
  type JobStep,
  LEDGER_KINDS,
  PLAY_KINDS,
  PLAY_STATUSES,
  type PlayCounters,
  SERVER_STATUSES,
  TASK_STATUSES,
  TOP_UP_STATUSES,
} from "@doppio/contracts";
import { sql } from "drizzle-orm";
import {
  bigint,
  boolean,
  index,
  integer,
  jsonb,
  pgEnum,
  pgTable,
  primaryKey,
  text,
  timestamp,
  uniqueIndex,
} from "drizzle-orm/pg-core";

/** Box statuses as the database knows them: the contracts' list, so a new status needs a migration. */
export const boxStatus = pgEnum("box_status", BOX_STATUSES);
/** Server statuses likewise: a server cannot hold a status the contracts do not list. */
export const serverStatus = pgEnum("server_status", SERVER_STATUSES);

const id = () => text("id").primaryKey();
const createdAt = () => timestamp("created_at", { withTimezone: true, mode: "date" }).notNull().defaultNow();
const ts = (name: string) => timestamp(name, { withTimezone: true, mode: "date" });

export const users = pgTable("users", {
  id: id(),
  email: text("email").notNull().unique(),
  name: text("name"),
  passwordHash: text("password_hash").notNull(),
  role: text("role", { enum: ["user", "admin"] })
    .notNull()
    .default("user"),
  /** Idle timeout for the user's boxes that have none of their own (minutes; null or 0: never). */
  idleTimeoutMinutes: integer("idle_timeout_minutes"),
  /** When the owner proved the address (a link, GitHub's verified email, an admin); null: not yet. */
  emailVerifiedAt: ts("email_verified_at"),
  createdAt: createdAt(),
});

/**
 * Email verification links (services/verification.ts): only the token's sha256 is kept; a
 * token is spent once (`used_at`), expires, and issuing a new one deletes the older ones.
 */
export const emailVerifications = pgTable(
  "email_verifications",
  {
    tokenHash: text("token_hash").primaryKey(),
    userId: text("user_id")
      .notNull()
      .references(() => users.id, { onDelete: "cascade" }),
    expiresAt: ts("expires_at").notNull(),
    usedAt: ts("used_at"),
    createdAt: createdAt(),
  },
  (t) => [index("email_verifications_user_idx").on(t.userId)],
);

export const teams = pgTable("teams", {
  id: id(),
  name: text("name").notNull(),
  createdAt: createdAt(),
});

export const teamMembers = pgTable(
  "team_members",
  {
    teamId: text("team_id")
      .notNull()
      .references(() => teams.id, { onDelete: "cascade" }),
    userId: text("user_id")
      .notNull()
      .references(() => users.id, { onDelete: "cascade" }),
    role: text("role", { enum: ["owner", "member"] })
      .notNull()
      .default("owner"),
    createdAt: createdAt(),
  },
  (t) => [primaryKey({ columns: [t.teamId, t.userId] }), index("team_members_user_idx").on(t.userId)],
);

export const sessions = pgTable(
  "sessions",
  {
    /** sha256 of the cookie value; the raw value is never stored. */
    tokenHash: text("token_hash").primaryKey(),
    userId: text("user_id")
      .notNull()
      .references(() => users.id, { onDelete: "cascade" }),
    expiresAt: ts("expires_at").notNull(),
    createdAt: createdAt(),
  },
  (t) => [index("sessions_user_idx").on(t.userId)],
);

export const apiTokens = pgTable(
  "api_tokens",
  {
    id: id(),
    userId: text("user_id")
      .notNull()
      .references(() => users.id, { onDelete: "cascade" }),
    name: text("name").notNull(),
    prefix: text("prefix").notNull(),
    tokenHash: text("token_hash").notNull().unique(),
    createdAt: createdAt(),
    lastUsedAt: ts("last_used_at"),
    revokedAt: ts("revoked_at"),
    /** Null: the token lasts until revoked. */
    expiresAt: ts("expires_at"),
  },
  (t) => [index("api_tokens_user_idx").on(t.userId)],
);

export const servers = pgTable("servers", {
  id: id(),
  name: text("name").notNull().unique(),
  domain: text("domain").notNull(),
  status: serverStatus("status").notNull().default("pending"),
  backend: text("backend", { enum: ["qemu", "firecracker"] }).notNull(),
  vcpu: integer("vcpu").notNull(),
  memoryMb: integer("memory_mb").notNull(),
  diskGb: integer("disk_gb").notNull(),
  publicScheme: text("public_scheme", { enum: ["https", "http"] })
    .notNull()
    .default("https"),
  publicPort: integer("public_port"),
  agentTokenHash: text("agent_token_hash").notNull().unique(),
  agentVersion: text("agent_version"),
  lastHeartbeatAt: ts("last_heartbeat_at"),
  /** Set by the liveness check once heartbeats stopped for longer than the grace; a heartbeat clears it. */
  unreachableSince: ts("unreachable_since"),
  /** Last inventory the agent reported (VMs and states). */
  inventory: jsonb("inventory").$type<Array<{ slug: string; state: string; ip: string | null }>>(),
  /** Why the server is in `error` (the failing task of its last play); null otherwise. */
  statusMessage: text("status_message"),
  /**
   * sha256 of the agent token the last play handed the host. The current token keeps working
   * until the agent first uses this one, which then replaces it (services/servers.ts).
   */
  nextAgentTokenHash: text("next_agent_token_hash").unique(),
  createdAt: createdAt(),
});

export const templates = pgTable("templates", {
  name: text("name").primaryKey(),
  title: text("title").notNull(),
  description: text("description").notNull(),
  version: text("version").notNull(),
  defaultSize: text("default_size", { enum: ["small", "medium", "large"] }).notNull(),
  isDefault: boolean("is_default").notNull().default(false),
  createdAt: createdAt(),
});

/** Golden snapshot status of a template on a server, as the agent last reported it. */
export const serverTemplates = pgTable(
  "server_templates",
  {
    serverId: text("server_id")
      .notNull()
      .references(() => servers.id, { onDelete: "cascade" }),
    template: text("template").notNull(),
    status: text("status", { enum: GOLDEN_STATUSES }).notNull(),
    version: text("version"),
    updatedAt: ts("updated_at").notNull(),
  },
  (t) => [primaryKey({ columns: [t.serverId, t.template] })],
);

/**
 * The warm pool of a template on a server (apps/agent/src/pool/warm.ts): the size an admin
 * set (null: the agent's configuration decides) and the agent's last report.
 */
export const serverWarmPools = pgTable(
  "server_warm_pools",
  {
    serverId: text("server_id")
      .notNull()
      .references(() => servers.id, { onDelete: "cascade" }),
    template: text("template").notNull(),
    size: integer("size"),
    target: integer("target").notNull().default(0),
    ready: integer("ready").notNull().default(0),
    filling: integer("filling").notNull().default(0),
    /** What one clone takes on that host, as the agent reports it (null: not reported yet). */
    diskGb: integer("disk_gb"),
    memoryMb: integer("memory_mb"),
    updatedAt: ts("updated_at").notNull(),
  },
  (t) => [primaryKey({ columns: [t.serverId, t.template] })],
);

export const boxes = pgTable(
  "boxes",
  {
    id: id(),
    slug: text("slug").notNull(),
    teamId: text("team_id")
      .notNull()
      .references(() => teams.id),
    ownerId: text("owner_id")
      .notNull()
      .references(() => users.id),
    template: text("template")
      .notNull()
      .references(() => templates.name),
    templateVersion: text("template_version").notNull(),
    serverId: text("server_id").references(() => servers.id),
    size: text("size", { enum: ["small", "medium", "large"] }).notNull(),
    vcpu: integer("vcpu").notNull(),
    memoryMb: integer("memory_mb").notNull(),
    diskGb: integer("disk_gb").notNull(),
    desiredState: text("desired_state", { enum: DESIRED_STATES }).notNull(),
    status: boxStatus("status").notNull(),
    statusReason: text("status_reason"),
    /** Code of the failure behind `status = 'error'` (a JobErrorCode); null otherwise. */
    errorCode: text("error_code"),
    ip: text("ip"),
    /** Bytes of saved memory on the host while the box is hibernated; null otherwise. */
    memoryFileBytes: bigint("memory_file_bytes", { mode: "number" }),
    /** The box's own idle timeout (minutes, 0: never); null: its owner's default. */
    idleTimeoutMinutes: integer("idle_timeout_minutes"),
    /** Anyone's request to its public site may wake it from hibernation. */
    publicWake: boolean("public_wake").notNull().default(false),
    /** Last use its host's edge reported (or a keep-awake, or its last start); idle time counts from it. */
    lastActiveAt: ts("last_active_at"),
    sitePublic: boolean("site_public").notNull().default(true),
    env: jsonb("env").$type<Record<string, string>>().notNull().default({}),
    /** GitHub repository (`owner/name`) the box's Git credentials are scoped to, if any. */
    repo: text("repo"),
    createdAt: createdAt(),
    updatedAt: ts("updated_at").notNull().defaultNow(),
    deletedAt: ts("deleted_at"),
  },
  (t) => [
    // A slug names one live box platform-wide (it is part of its hostnames).
    uniqueIndex("boxes_live_slug_idx").on(t.slug).where(sql`deleted_at IS NULL`),
    index("boxes_team_idx").on(t.teamId),
    index("boxes_server_idx").on(t.serverId),
    // Placement sums the live boxes per server, and a create counts its owner's live boxes:
    // neither reads the deleted ones, which accumulate for as long as the platform runs.
    index("boxes_live_server_idx").on(t.serverId).where(sql`deleted_at IS NULL`),
    index("boxes_live_owner_idx").on(t.ownerId).where(sql`deleted_at IS NULL`),
  ],
);

export const agentJobs = pgTable(
  "agent_jobs",
  {
    id: id(),
    action: text("action", { enum: JOB_ACTIONS }).notNull(),
    boxId: text("box_id").references(() => boxes.id),
    serverId: text("server_id")
      .notNull()
      .references(() => servers.id),
    payload: jsonb("payload").$type<Record<string, unknown>>().notNull(),
    status: text("status", { enum: JOB_STATUSES }).notNull().default("pending"),
    attempts: integer("attempts").notNull().default(0),
    leaseExpiresAt: ts("lease_expires_at"),
    /** Highest event sequence applied; events at or below it are ignored. */
    lastSeq: integer("last_seq").notNull().default(0),
    steps: jsonb("steps").$type<JobStep[]>().notNull().default([]),
    log: text("log").notNull().default(""),
    error: text("error"),
    /** Code of the failure (a JobErrorCode); null unless the job failed. */
    errorCode: text("error_code"),
    result: jsonb("result").$type<Record<string, unknown>>(),
    /** Monotonic enqueue order (claim order), independent of clock resolution. */
    seqNo: bigint("seq_no", { mode: "number" }).generatedAlwaysAsIdentity(),
    createdAt: createdAt(),
    startedAt: ts("started_at"),
    finishedAt: ts("finished_at"),
  },
  (t) => [
    index("agent_jobs_claim_idx").on(t.serverId, t.status, t.seqNo),
    index("agent_jobs_box_idx").on(t.boxId),
    // One lifecycle job in flight per box, enforced by the database itself.
    uniqueIndex("agent_jobs_one_inflight_per_box_idx")
      .on(t.boxId)
      .where(sql`status IN ('pending', 'delivered', 'running') AND box_id IS NOT NULL`),
  ],
);

export const auditEvents = pgTable(
  "audit_events",
  {
    id: id(),
    actorUserId: text("actor_user_id"),
    actorServerId: text("actor_server_id"),
    action: text("action").notNull(),
    targetType: text("target_type", {
      enum: ["box", "server", "user", "token", "template", "price", "wallet"],
    }).notNull(),
    targetId: text("target_id").notNull(),
    data: jsonb("data").$type<Record<string, unknown>>(),
    at: createdAt(),
  },
  (t) => [index("audit_target_idx").on(t.targetType, t.targetId)],
);

/** Small named values the control plane keeps for itself, e.g. its access-token signing key. */
export const settings = pgTable("settings", {
  key: text("key").primaryKey(),
  value: text("value").notNull(),
  createdAt: createdAt(),
});

/**
 * Recent guest log lines per box (serial console and service output), shipped by the
 * agent; trimmed to the newest LOG_KEEP_LINES per box. `seq` orders lines platform-wide,
 * so a client resumes after the last one it saw.
 */
export const boxLogs = pgTable(
  "box_logs",
  {
    seq: bigint("seq", { mode: "number" }).primaryKey().generatedAlwaysAsIdentity(),
    boxId: text("box_id")
      .notNull()
      .references(() => boxes.id, { onDelete: "cascade" }),
    at: ts("at").notNull(),
    source: text("source").notNull(),
    text: text("text").notNull(),
  },
  (t) => [index("box_logs_box_seq_idx").on(t.boxId, t.seq)],
);

/** How far the control plane holds each box's serial log (the agent resumes from here). */
export const boxLogCursors = pgTable("box_log_cursors", {
  boxId: text("box_id")
    .primaryKey()
    .references(() => boxes.id, { onDelete: "cascade" }),
  epoch: bigint("epoch", { mode: "number" }).notNull(),
  offset: bigint("offset", { mode: "number" }).notNull(),
  updatedAt: ts("updated_at").notNull().defaultNow(),
});

/**
 * Which control-plane sign-ins (`sid`: a hash of the session or API token, see
 * services/access.ts) opened private box URLs on which server. Signing out sets `endedAt`;
 * heartbeats carry the server's ended ones until `expiresAt` (its last hand-off plus the
 * edge cookie's lifetime), so its agent refuses the box-access cookies they led to.
 */
export const boxAccessGrants = pgTable(
  "box_access_grants",
  {
    sid: text("sid").notNull(),
    serverId: text("server_id")
      .notNull()
      .references(() => servers.id, { onDelete: "cascade" }),
    expiresAt: ts("expires_at").notNull(),
    endedAt: ts("ended_at"),
  },
  (t) => [primaryKey({ columns: [t.sid, t.serverId] }), index("box_access_grants_server_idx").on(t.serverId)],
);

/**
 * Recent rate-limited attempts (sign-ins, box creations), one row per key with the times
 * of the attempts its window still holds, shared by every replica so a limit holds however
 * requests are spread (services/rate-limits.ts); keys idle longer than any window are dropped.
 */
export const rateWindows = pgTable("rate_windows", {
  key: text("key").primaryKey(),
  hits: ts("hits").array().notNull(),
  /** Whether the key's last attempt was refused (it is then not among `hits`). */
  refused: boolean("refused").notNull(),
});

// ---- Billing (services/billing/*). Money columns are bigint minor units, never floats.

/** Price versions per box size; the one with the latest `effective_from` not after a moment applies to it. */
export const prices = pgTable(
  "prices",
  {
    id: id(),
    size: text("size", { enum: ["small", "medium", "large"] }).notNull(),
    computePerHour: bigint("compute_per_hour", { mode: "number" }).notNull(),
    storagePerGbMonth: bigint("storage_per_gb_month", { mode: "number" }).notNull(),
    effectiveFrom: ts("effective_from").notNull(),
    createdBy: text("created_by"),
    createdAt: createdAt(),
  },
  (t) => [uniqueIndex("prices_size_from_idx").on(t.size, t.effectiveFrom)],
);

/**
 * The wallet ledger: append-only (a trigger refuses UPDATE and DELETE, drizzle/*_ledger_append_only.sql).
 * `key` makes each business event land once (usage per box period, a Stripe event, a trial).
 */
export const ledgerEntries = pgTable(
  "ledger_entries",
  {
    seq: bigint("seq", { mode: "number" }).primaryKey().generatedAlwaysAsIdentity(),
    userId: text("user_id")
      .notNull()
      .references(() => users.id),
    kind: text("kind", { enum: LEDGER_KINDS }).notNull(),
    amount: bigint("amount", { mode: "number" }).notNull(),
    key: text("key").notNull().unique(),
    boxId: text("box_id").references(() => boxes.id),
    periodStart: ts("period_start"),
    periodEnd: ts("period_end"),
    /** Trial credit: when what is left of it expires. */
    expiresAt: ts("expires_at"),
    memo: text("memo"),
    at: ts("at").notNull(),
  },
  (t) => [index("ledger_user_seq_idx").on(t.userId, t.seq)],
);

/**
 * Trial credit given, one row per normalised email address (billing/trial.ts): the primary
 * key makes a second trial for the same address (another account, a re-signup, a `+tag`)
 * impossible, and `user_id` unique one per account. No foreign key: the row outlives the
 * account, so the address never earns a trial again.
 */
export const trialGrants = pgTable("trial_grants", {
  emailKey: text("email_key").primaryKey(),
  userId: text("user_id").notNull().unique(),
  grantedAt: ts("granted_at").notNull(),
});

/** The balance cache: the sum of the user's ledger, kept in the transaction that appends to it. */
export const wallets = pgTable("wallets", {
  userId: text("user_id")
    .primaryKey()
    .references(() => users.id),
  balance: bigint("balance", { mode: "number" }).notNull().default(0),
  /** When the owner was last warned (low or empty); cleared when the balance recovers. */
  warnedState: text("warned_state", { enum: ["low", "empty"] }),
  updatedAt: ts("updated_at").notNull().defaultNow(),
});

/**
 * Every status a box has had and from when (`at` is the box's `updated_at` of that change),
 * written by a trigger on `boxes` (drizzle/*_box_status_history.sql) so no status write can
 * be missed. Metering reads intervals from it.
 */
export const boxStatusHistory = pgTable(
  "box_status_history",
  {
    seq: bigint("seq", { mode: "number" }).primaryKey().generatedAlwaysAsIdentity(),
    boxId: text("box_id")
      .notNull()
      .references(() => boxes.id),
    status: boxStatus("status").notNull(),
    size: text("size").notNull(),
    diskGb: integer("disk_gb").notNull(),
    at: ts("at").notNull(),
  },
  (t) => [index("box_status_history_box_idx").on(t.boxId, t.at)],
);

/**
 * One settled metering period of one box (append-only like the ledger): `[period_start,
 * period_end)`, split at month boundaries. The primary key makes settling twice impossible;
 * the carries keep the sub-cent remainders, so rounding never loses or invents money.
 */
export const usageSettlements = pgTable(
  "usage_settlements",
  {
    boxId: text("box_id")
      .notNull()
      .references(() => boxes.id),
    periodStart: ts("period_start").notNull(),
    periodEnd: ts("period_end").notNull(),
    userId: text("user_id")
      .notNull()
      .references(() => users.id),
    computeMs: bigint("compute_ms", { mode: "number" }).notNull(),
    storageGbMs: bigint("storage_gb_ms", { mode: "number" }).notNull(),
    computeAmount: bigint("compute_amount", { mode: "number" }).notNull(),
    storageAmount: bigint("storage_amount", { mode: "number" }).notNull(),
    /** Remainders in minor units × MS_PER_STORAGE_MONTH (exact fractions of a cent). */
    computeCarry: bigint("compute_carry", { mode: "number" }).notNull(),
    storageCarry: bigint("storage_carry", { mode: "number" }).notNull(),
  },
  (t) => [
    primaryKey({ columns: [t.boxId, t.periodStart] }),
    index("usage_user_idx").on(t.userId, t.periodStart),
  ],
);

/** Checkout Sessions this control plane created, to know whose wallet a payment tops up. */
export const topUps = pgTable(
  "top_ups",
  {
    sessionId: text("session_id").primaryKey(),
    userId: text("user_id")
      .notNull()
      .references(() => users.id),
    amount: bigint("amount", { mode: "number" }).notNull(),
    currency: text("currency").notNull(),
    paymentIntent: text("payment_intent"),
    status: text("status", { enum: TOP_UP_STATUSES }).notNull().default("open"),
    /** Why a `failed` or `expired` top-up did not credit anything (shown on the Billing page). */
    failureReason: text("failure_reason"),
    /** Minor units taken back since by refunds and disputes of its payment. */
    refunded: bigint("refunded", { mode: "number" }).notNull().default(0),
    createdAt: createdAt(),
    /** The last status change. */
    updatedAt: ts("updated_at"),
  },
  (t) => [index("top_ups_payment_intent_idx").on(t.paymentIntent)],
);

/** Stripe events already handled, by event id: a replay changes nothing. */
export const stripeEvents = pgTable("stripe_events", {
  id: text("id").primaryKey(),
  type: text("type").notNull(),
  receivedAt: ts("received_at").notNull(),
});

/** Monthly invoices, append-only (issued once, never changed). */
export const invoices = pgTable(
  "invoices",
  {
    id: id(),
    userId: text("user_id")
      .notNull()
      .references(() => users.id),
    month: text("month").notNull(),
    currency: text("currency").notNull(),
    usageTotal: bigint("usage_total", { mode: "number" }).notNull(),
    creditsTotal: bigint("credits_total", { mode: "number" }).notNull(),
    lines: jsonb("lines")
      .$type<
        Array<{
          box: string | null;
          description: string;
          quantityMilli: number;
          unit: "hours" | "GB-months" | "credit";
          amount: number;
        }>
      >()
      .notNull(),
    issuedAt: ts("issued_at").notNull(),
  },
  (t) => [uniqueIndex("invoices_user_month_idx").on(t.userId, t.month)],
);
/**
 * The GitHub App this control plane acts as (one row, `id = 'app'`), written at start from
 * the configuration. Its secrets are sealed (auth/sealed.ts) under the configured key.
 */
export const githubApp = pgTable("github_app", {
  id: text("id").primaryKey(),
  appId: bigint("app_id", { mode: "number" }).notNull(),
  appSlug: text("app_slug").notNull(),
  clientId: text("client_id").notNull(),
  webUrl: text("web_url").notNull(),
  apiUrl: text("api_url").notNull(),
  privateKeySealed: text("private_key_sealed").notNull(),
  clientSecretSealed: text("client_secret_sealed").notNull(),
  webhookSecretSealed: text("webhook_secret_sealed").notNull(),
  updatedAt: ts("updated_at").notNull(),
});

/** A doppio user's linked GitHub account and its user access token (sealed). */
export const githubAccounts = pgTable("github_accounts", {
  userId: text("user_id")
    .primaryKey()
    .references(() => users.id, { onDelete: "cascade" }),
  githubId: bigint("github_id", { mode: "number" }).notNull().unique(),
  login: text("login").notNull(),
  tokenSealed: text("token_sealed").notNull(),
  tokenExpiresAt: ts("token_expires_at"),
  /**
   * GitHub's refresh token for an expiring user token (sealed like it; null when the app's
   * user tokens do not expire): one use, swapped with the user token (github/oauth.ts).
   */
  refreshTokenSealed: text("refresh_token_sealed"),
  refreshTokenExpiresAt: ts("refresh_token_expires_at"),
  /** The doppio account was made by signing in with GitHub: it has no password its user knows. */
  createdByGithub: boolean("created_by_github").notNull().default(false),
  linkedAt: createdAt(),
});

/** Installations of the app (on a user or an organisation), as GitHub reported them. */
export const githubInstallations = pgTable("github_installations", {
  id: bigint("id", { mode: "number" }).primaryKey(),
  accountLogin: text("account_login").notNull(),
  accountId: bigint("account_id", { mode: "number" }).notNull(),
  accountType: text("account_type").notNull(),
  repositorySelection: text("repository_selection", { enum: ["all", "selected"] }).notNull(),
  suspendedAt: ts("suspended_at"),
  /** Uninstalled: no token is minted for it again. */
  removedAt: ts("removed_at"),
  updatedAt: ts("updated_at").notNull(),
});

/** Which doppio users connected which installation (proved by their own GitHub token). */
export const githubInstallationUsers = pgTable(
  "github_installation_users",
  {
    installationId: bigint("installation_id", { mode: "number" })
      .notNull()
      .references(() => githubInstallations.id, { onDelete: "cascade" }),
    userId: text("user_id")
      .notNull()
      .references(() => users.id, { onDelete: "cascade" }),
    connectedAt: createdAt(),
  },
  (t) => [
    primaryKey({ columns: [t.installationId, t.userId] }),
    index("github_inst_users_user_idx").on(t.userId),
  ],
);

/** The repositories each installation may reach. */
export const githubRepos = pgTable(
  "github_repos",
  {
    installationId: bigint("installation_id", { mode: "number" })
      .notNull()
      .references(() => githubInstallations.id, { onDelete: "cascade" }),
    repoId: bigint("repo_id", { mode: "number" }).notNull(),
    /** `owner/name`, lower-cased for lookups; `fullName` keeps GitHub's spelling. */
    fullNameLower: text("full_name_lower").notNull(),
    fullName: text("full_name").notNull(),
    private: boolean("private").notNull(),
  },
  (t) => [
    primaryKey({ columns: [t.installationId, t.repoId] }),
    index("github_repos_name_idx").on(t.fullNameLower),
  ],
);

/**
 * One OAuth round trip in flight: the `state` (stored as sha256) is bound to the browser
 * that started it (sha256 of a cookie only that browser holds), used once, and short-lived.
 */
export const githubOauthStates = pgTable("github_oauth_states", {
  stateHash: text("state_hash").primaryKey(),
  browserHash: text("browser_hash").notNull(),
  intent: text("intent", { enum: ["login", "link"] }).notNull(),
  /** The signed-in user who asked to link (intent `link`). */
  userId: text("user_id").references(() => users.id, { onDelete: "cascade" }),
  verifierSealed: text("verifier_sealed").notNull(),
  expiresAt: ts("expires_at").notNull(),
  usedAt: ts("used_at"),
});

/** Webhook deliveries already handled (X-GitHub-Delivery), so a redelivery is a no-op. */
export const githubDeliveries = pgTable("github_deliveries", {
  id: text("id").primaryKey(),
  event: text("event").notNull(),
  receivedAt: createdAt(),
});
/** How the control plane reaches a host over SSH; `hostKeys` are pinned on first contact. */
export const serverSsh = pgTable("server_ssh", {
  serverId: text("server_id")
    .primaryKey()
    .references(() => servers.id, { onDelete: "cascade" }),
  host: text("host").notNull(),
  port: integer("port").notNull(),
  user: text("user").notNull(),
  controlPlaneUrl: text("control_plane_url"),
  /** known_hosts lines recorded by the first play that reached the host. */
  hostKeys: text("host_keys"),
  updatedAt: ts("updated_at").notNull().defaultNow(),
});

/** One ansible-playbook run against a server (apps/api/src/ansible/). */
export const ansiblePlays = pgTable(
  "ansible_plays",
  {
    id: id(),
    serverId: text("server_id")
      .notNull()
      .references(() => servers.id, { onDelete: "cascade" }),
    playbook: text("playbook", { enum: PLAY_KINDS }).notNull(),
    status: text("status", { enum: PLAY_STATUSES }).notNull().default("pending"),
    createdBy: text("created_by").references(() => users.id),
    /** Inputs with secrets replaced by "[redacted]". */
    variables: jsonb("variables").$type<Record<string, unknown>>().notNull(),
    counters: jsonb("counters").$type<PlayCounters>(),
    error: text("error"),
    /** The ansible-playbook process (its process group), while it runs. */
    pid: integer("pid"),
    createdAt: createdAt(),
    startedAt: ts("started_at"),
    endedAt: ts("ended_at"),
  },
  (t) => [
    index("ansible_plays_server_idx").on(t.serverId, t.createdAt),
    // One play per server at a time, enforced by the database itself.
    uniqueIndex("ansible_plays_one_active_per_server_idx")
      .on(t.serverId)
      .where(sql`status IN ('pending', 'running')`),
  ],
);

/** A task of a play: pre-created from the play's task list when it starts, updated as it runs. */
export const ansibleTasks = pgTable(
  "ansible_tasks",
  {
    playId: text("play_id")
      .notNull()
      .references(() => ansiblePlays.id, { onDelete: "cascade" }),
    /** Ansible's task uuid. */
    taskId: text("task_id").notNull(),
    position: integer("position").notNull(),
    name: text("name").notNull(),
    role: text("role"),
    handler: boolean("handler").notNull().default(false),
    status: text("status", { enum: TASK_STATUSES }).notNull().default("pending"),
    startedAt: ts("started_at"),
    endedAt: ts("ended_at"),
    output: text("output"),
    error: text("error"),
  },
  (t) => [primaryKey({ columns: [t.playId, t.taskId] })],
);
