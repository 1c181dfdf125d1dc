import { readFileSync } from "node:fs";
import { isIP } from "node:net";
import path from "node:path";
import { Email, IDLE_TIMEOUT_MAX_MINUTES } from "@doppio/contracts";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { MIN_SCRYPT_N, RECOMMENDED_SCRYPT_N } from "./auth/password.ts";
import { GitHubConfig, githubFromEnv } from "./github/config.ts";

/** An IPv4/IPv6 address or a CIDR block of them (`10.0.0.0/8`, `fd00::/8`). */
const AddressOrCidr = z.string().refine((v) => {
  const [addr, prefix, ...rest] = v.split("/");
  if (rest.length > 0 || !addr) return false;
  const family = isIP(addr);
  if (family === 0) return false;
  if (prefix === undefined) return true;
  const bits = Number(prefix);
  return /^\d{1,3}$/.test(prefix) && bits <= (family === 4 ? 32 : 128);
}, "must be an IP address or a CIDR block");

/** The control plane's whole configuration, parsed once at start. */
export const ApiConfig = z.strictObject({
  host: z.string().default("127.0.0.1"),
  port: z.coerce.number().int().min(0).max(65535).default(8080),
  /** Where PGlite keeps its data directory and the control plane its keys. */
  dataDir: z.string().default(".data/api"),
  /** postgres://… switches from embedded PGlite to PostgreSQL. */
  databaseUrl: z.string().url().optional(),
  /**
   * Connections each replica may hold to PostgreSQL (besides the bus's listener). A create
   * waiting for a server's placement lock holds its connection. 20 instead of 10 made no
   * difference in `npm run bench:load` here (2 cores shared with PostgreSQL).
   */
  databasePoolSize: z.coerce.number().int().min(2).max(200).default(10),
  /** Public base URL of this control plane (used in links and cookie security). */
  publicUrl: z.string().url().default("http://127.0.0.1:8080"),
  logLevel: z.enum(["fatal", "error", "warn", "info", "debug", "trace", "silent"]).default("info"),
  bodyLimitBytes: z.coerce
    .number()
    .int()
    .positive()
    .default(64 * 1024),
  /**
   * scrypt's cost N for new password hashes (r=8, p=1). 2^17, the default, is what OWASP's
   * Password Storage Cheat Sheet recommends. Lower ones (down to 2^14) are for tests and
   * development machines only: each hash is cheaper to make and so to crack. A stored hash
   * keeps its own parameters and moves to this one at its user's next login.
   */
  passwordScryptN: z.coerce
    .number()
    .int()
    .min(MIN_SCRYPT_N)
    .max(RECOMMENDED_SCRYPT_N)
    .refine((n) => (n & (n - 1)) === 0, "must be a power of two")
    .default(RECOMMENDED_SCRYPT_N),
  sessionTtlHours: z.coerce
    .number()
    .positive()
    .default(24 * 14),
  /** Signup/login attempts allowed per client address per minute. */
  authRateLimitPerMinute: z.coerce.number().int().positive().default(20),
  /**
   * Reverse proxies (addresses or CIDR blocks) whose X-Forwarded-For is believed: a request
   * from one of them counts as from the last address its proxies added that is not itself
   * trusted. Default none: the client address is the connection's, and a client's own
   * X-Forwarded-For is ignored (rate limits could otherwise be dodged by making one up).
   * The environment variable takes a comma-separated list.
   */
  trustProxy: z
    .preprocess(
      (v) =>
        typeof v === "string"
          ? v
              .split(",")
              .map((s) => s.trim())
              .filter(Boolean)
          : v,
      z.array(AddressOrCidr),
    )
    .default([]),
  /** How long a delivered job may wait for its first event before it goes back to pending. */
  deliveryLeaseMs: z.coerce.number().int().positive().default(60_000),
  /** How long a running job may go without any word from its agent before it fails. */
  runningLeaseMs: z.coerce
    .number()
    .int()
    .positive()
    .default(15 * 60_000),
  /** A server whose last heartbeat is older than this takes no new boxes. */
  heartbeatFreshMs: z.coerce.number().int().positive().default(90_000),
  reaperIntervalMs: z.coerce.number().int().positive().default(5_000),
  /** First wait before a lost PostgreSQL LISTEN connection is reopened (doubles up to 5 s). */
  busReconnectMs: z.coerce.number().int().positive().default(250),
  /** Longest a claim long-poll may be held open. */
  maxClaimWaitMs: z.coerce.number().int().positive().default(25_000),
  /** Directory of the built dashboard, served under /dashboard when present. */
  dashboardDir: z.string().optional(),
  /**
   * The administrator, created at start when the account does not exist (a file holds its
   * initial password, so no secret sits in the config). Signing up never makes an admin.
   */
  adminEmail: Email.optional(),
  adminPasswordFile: z.string().optional(),
  /** When set, `GET /metrics` wants `Authorization: Bearer <metricsToken>`. */
  metricsToken: z.string().min(16).optional(),
  /** Boxes one user may have at once (403 beyond). */
  boxQuotaPerUser: z.coerce.number().int().positive().default(20),
  /** Box creations one user may ask for per minute (429 with Retry-After beyond). */
  boxCreatesPerMinute: z.coerce.number().int().positive().default(30),
  /** Event and log streams one user may hold open at once (429 beyond). */
  streamsPerUser: z.coerce.number().int().positive().default(16),
  /** Bytes a stream may have waiting for a slow reader before it is closed (the reader resumes). */
  streamBufferBytes: z.coerce
    .number()
    .int()
    .positive()
    .default(1024 * 1024),
  /**
   * The idle timeout every new account starts with (0: never); each user changes their own
   * (`PATCH /api/v1/me/idle`) and each box may override it.
   */
  idleTimeoutDefaultMinutes: z.coerce.number().int().min(0).max(IDLE_TIMEOUT_MAX_MINUTES).default(30),
  // Billing (apps/api/src/billing). Money is integer minor units of `currency`.
  currency: z
    .string()
    .regex(/^[A-Z]{3}$/)
    .default("EUR"),
  /** Credit every new account gets once, and how long it lasts. */
  trialCredit: z.coerce.number().int().min(0).default(2000),
  trialDays: z.coerce.number().int().positive().default(30),
  /** At or below this balance the owner is warned (dashboard banner, SSE `wallet` event, email hook). */
  lowBalanceThreshold: z.coerce.number().int().min(0).default(200),
  /** How often usage is settled into the ledger (also at every box state change). */
  settleIntervalMs: z.coerce.number().int().positive().default(120_000),
  /** Stripe: card top-ups are offered only when both are set. */
  stripeSecretKey: z.string().min(1).optional(),
  stripeWebhookSecret: z.string().min(1).optional(),
  /** Where the Stripe library sends its API calls (tests point it at a local stand-in). */
  stripeApi: z
    .strictObject({
      host: z.string(),
      port: z.coerce.number().int().min(1).max(65535),
      protocol: z.enum(["http", "https"]),
    })
    .optional(),
  /**
   * Wallet notices by email (low balance, empty wallet, failed top-up) through this SMTP
   * server, e.g. smtp://user:pass@mail.example.com:587 (STARTTLS when offered) or smtps://…
   * Off unless both are set: the notices then go to the log only.
   */
  smtpUrl: z
    .string()
    .regex(/^smtps?:\/\//)
    .optional(),
  mailFrom: z.string().min(3).max(200).optional(),
  /**
   * `required`: a password signup is unverified (no trial credit) until its owner opens the
   * link mailed to them (written to the log at info when no mail transport is configured;
   * an admin can also mark an account verified). `off`: accounts are verified at creation.
   * Unset: `required` when `smtpUrl` and `mailFrom` are set, else `off` (a local `make up`).
   */
  emailVerification: z.enum(["required", "off"]).optional(),
  /** Verification links one account may ask to be resent per hour (429 beyond). */
  verificationResendsPerHour: z.coerce.number().int().positive().default(3),
  topUpMin: z.coerce.number().int().positive().default(500),
  topUpMax: z.coerce.number().int().positive().default(100_000),
  /** The GitHub App (sign-in, installations, tokens for boxes); GitHub is off when unset. */
  github: GitHubConfig.optional(),
  /** The playbooks the control plane runs on hosts (Prepare server, Deploy agent). */
  ansibleDir: z.string().default(path.resolve(import.meta.dirname, "../../../provision/ansible")),
  /** A built agent bundle (provision/bundle/) for plays; built from this checkout when unset. */
  agentBundle: z.string().optional(),
});
export type ApiConfig = z.infer<typeof ApiConfig>;

/** Whether password signups must verify their address (see `emailVerification`). */
export function verificationRequired(config: ApiConfig): boolean {
  return (
    (config.emailVerification ?? (config.smtpUrl && config.mailFrom ? "required" : "off")) === "required"
  );
}

const ENV_KEYS: Record<string, keyof ApiConfig> = {
  DOPPIO_API_HOST: "host",
  DOPPIO_API_PORT: "port",
  DOPPIO_API_DATA_DIR: "dataDir",
  DATABASE_URL: "databaseUrl",
  DOPPIO_DATABASE_POOL_SIZE: "databasePoolSize",
  DOPPIO_PASSWORD_SCRYPT_N: "passwordScryptN",
  DOPPIO_PUBLIC_URL: "publicUrl",
  DOPPIO_LOG_LEVEL: "logLevel",
  DOPPIO_DASHBOARD_DIR: "dashboardDir",
  DOPPIO_ADMIN_EMAIL: "adminEmail",
  DOPPIO_ADMIN_PASSWORD_FILE: "adminPasswordFile",
  DOPPIO_METRICS_TOKEN: "metricsToken",
  DOPPIO_IDLE_TIMEOUT_DEFAULT_MINUTES: "idleTimeoutDefaultMinutes",
  DOPPIO_STRIPE_SECRET_KEY: "stripeSecretKey",
  DOPPIO_STRIPE_WEBHOOK_SECRET: "stripeWebhookSecret",
  DOPPIO_SMTP_URL: "smtpUrl",
  DOPPIO_MAIL_FROM: "mailFrom",
  DOPPIO_EMAIL_VERIFICATION: "emailVerification",
  DOPPIO_ANSIBLE_DIR: "ansibleDir",
  DOPPIO_AGENT_BUNDLE: "agentBundle",
  DOPPIO_TRUST_PROXY: "trustProxy",
};

/** YAML file (path in DOPPIO_API_CONFIG) overlaid with the environment variables above. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): ApiConfig {
  const file = env.DOPPIO_API_CONFIG;
  const fromFile = file ? (parseYaml(readFileSync(file, "utf8")) ?? {}) : {};
  const fromEnv: Record<string, unknown> = {};
  for (const [key, field] of Object.entries(ENV_KEYS)) {
    const value = env[key];
    if (value !== undefined && value !== "") fromEnv[field] = value;
  }
  const github = githubFromEnv(env);
  if (github) fromEnv.github = { ...fromFile.github, ...github };
  const parsed = ApiConfig.safeParse({ ...fromFile, ...fromEnv });
  if (!parsed.success) {
    throw new Error(`invalid control-plane configuration: ${z.prettifyError(parsed.error)}`);
  }
  return parsed.data;
}
