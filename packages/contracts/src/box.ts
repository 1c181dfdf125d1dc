import { z } from "zod";
import { RepoFullName } from "./github.ts";
import { BOX_ACTIONS, type BoxAction, JobErrorCode } from "./job.ts";
import { Slug } from "./slug.ts";

/** What the user wants the box to be. */
export const DESIRED_STATES = ["running", "stopped", "deleted"] as const;
export type DesiredState = (typeof DESIRED_STATES)[number];

/** What the platform last observed (or is doing). */
export const BOX_STATUSES = [
  "creating", // from the create request on, until the box first runs
  "starting",
  "running",
  "stopping",
  "stopped",
  "hibernating",
  /** Memory saved on the host, VMM gone: `start` resumes its processes where they were. */
  "hibernated",
  "resetting",
  "deleting",
  "deleted",
  "error",
  // Its host stopped heartbeating: whatever the box was doing, nobody knows now. Shown, never
  // stored: the stored status comes back when the host does.
  "unknown",
] as const;
export type BoxStatus = (typeof BOX_STATUSES)[number];

/** Which user action is allowed in which observed state. `create` is only ever the first job. */
const ALLOWED: Record<BoxStatus, readonly BoxAction[]> = {
  creating: ["delete"],
  starting: ["delete"],
  running: ["stop", "hibernate", "reset", "delete"],
  stopping: ["delete"],
  stopped: ["start", "reset", "delete"],
  hibernating: ["delete"],
  // stop discards the saved memory (the disks stay), reset and delete discard it too.
  hibernated: ["start", "stop", "reset", "delete"],
  resetting: ["delete"],
  deleting: [],
  deleted: [],
  error: ["start", "stop", "reset", "delete"],
  unknown: [],
};

export function allowedActions(status: BoxStatus): readonly BoxAction[] {
  return ALLOWED[status];
}

export function canPerform(status: BoxStatus, action: BoxAction): boolean {
  return ALLOWED[status].includes(action);
}

/** Status a box shows while a job for `action` is queued or running. */
export const IN_FLIGHT_STATUS: Record<BoxAction, BoxStatus> = {
  create: "creating",
  start: "starting",
  stop: "stopping",
  reset: "resetting",
  delete: "deleting",
  hibernate: "hibernating",
};

/** Status after the job for `action` succeeded, and the desired state the action sets. */
export const SETTLED_STATUS: Record<BoxAction, BoxStatus> = {
  create: "running",
  start: "running",
  stop: "stopped",
  reset: "running",
  delete: "deleted",
  hibernate: "hibernated",
};
export const DESIRED_AFTER: Record<BoxAction, DesiredState> = {
  create: "running",
  start: "running",
  stop: "stopped",
  reset: "running",
  delete: "deleted",
  // Not running: nothing restarts it by itself; a start (or a wake) resumes it.
  hibernate: "stopped",
};

export const BOX_SIZES = {
  small: { vcpu: 1, memoryMb: 2048, diskGb: 10 },
  medium: { vcpu: 2, memoryMb: 4096, diskGb: 20 },
  large: { vcpu: 4, memoryMb: 8192, diskGb: 40 },
} as const;
export type BoxSizeName = keyof typeof BOX_SIZES;
export const BoxSize = z.enum(Object.keys(BOX_SIZES) as [BoxSizeName, ...BoxSizeName[]]);

export interface BoxUrls {
  site: string;
  code: string;
  /** Template for dev ports; replace `{port}`. */
  devPort: string;
}

/** A box's public URLs (the host shapes in hosts.ts): site, code-server and dev-port hosts. */
export function boxUrls(
  slug: string,
  domain: string,
  scheme: "https" | "http" = "https",
  port?: number,
): BoxUrls {
  const suffix = port && port !== (scheme === "https" ? 443 : 80) ? `:${port}` : "";
  return {
    site: `${scheme}://${slug}.site.${domain}${suffix}`,
    code: `${scheme}://${slug}.code.${domain}${suffix}`,
    devPort: `${scheme}://{port}-${slug}.code.${domain}${suffix}`,
  };
}

/**
 * Size of the metadata blob a guest reads at boot. QEMU pads its fw_cfg entry to exactly
 * this (the guest keeps the entry size it saw first, even across a restore), so the agent
 * refuses a box whose metadata does not fit: the env budget below is derived from it.
 */
export const METADATA_SIZE = 16 * 1024;
/** Room in the blob for everything but env: slug, URLs, network, metadata URL, secrets, clock. */
export const METADATA_RESERVED = 4 * 1024;
/** An env's budget, counted the way the blob carries it: compact JSON, UTF-8 bytes. */
export const ENV_MAX_BYTES = METADATA_SIZE - METADATA_RESERVED;

export function envBytes(env: Record<string, string>): number {
  return new TextEncoder().encode(JSON.stringify(env)).length;
}

/** Environment variable names users may set; values are strings. */
export const ENV_NAME_RE = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;
export const ENV_VALUE_MAX = 4096;
export const ENV_VARS_MAX = 64;
export const BoxEnv = z
  .record(
    z
      .string()
      .max(128, { abort: true })
      .regex(ENV_NAME_RE, "environment variable names are letters, digits and _"),
    z.string().max(ENV_VALUE_MAX),
  )
  .refine((env) => Object.keys(env).length <= ENV_VARS_MAX, `at most ${ENV_VARS_MAX} environment variables`)
  .refine(
    (env) => envBytes(env) <= ENV_MAX_BYTES,
    `environment variables may take at most ${ENV_MAX_BYTES} bytes (as JSON)`,
  );
export type BoxEnv = z.infer<typeof BoxEnv>;

export const CreateBoxRequest = z.strictObject({
  name: Slug.optional(),
  template: z.string().min(1).max(64),
  size: BoxSize.optional(),
  env: BoxEnv.optional(),
  /** A GitHub repository (`owner/name`) you connected: the box's Git credentials are scoped to it. */
  repo: RepoFullName.optional(),
});
export type CreateBoxRequest = z.infer<typeof CreateBoxRequest>;

export const UpdateBoxRequest = z.strictObject({ env: BoxEnv });

export const Box = z.object({
  slug: z.string(),
  template: z.string(),
  size: BoxSize,
  desiredState: z.enum(DESIRED_STATES),
  status: z.enum(BOX_STATUSES),
  statusReason: z.string().nullable(),
  /** Code of the failure that left the box in `error` (see JobErrorCode); null otherwise. */
  errorCode: JobErrorCode.nullable(),
  server: z.string().nullable(),
  ip: z.string().nullable(),
  urls: z.object({ site: z.string(), code: z.string(), devPort: z.string() }).nullable(),
  env: z.record(z.string(), z.string()),
  /** The GitHub repository the box was created from, if any. */
  repo: z.string().nullable().default(null),
  allowedActions: z.array(z.enum(BOX_ACTIONS)),
  /**
   * Bytes of host disk the box's saved memory takes while it is hibernated (counted as
   * the box's storage beside its disks); null when it has none.
   */
  memoryFileBytes: z.number().int().nonnegative().nullable(),
  /** Idle timeout that applies (the box's own or its owner's default); null: never hibernates when idle. */
  idleTimeoutMinutes: z.number().int().nullable(),
  /** Whether the timeout is the box's own (else its owner's default). */
  idleTimeoutCustom: z.boolean(),
  /** When the running box hibernates unless it is used (or kept awake) before; null otherwise. */
  idleHibernatesAt: z.string().nullable(),
  /** Anyone's request to its public site may wake it from hibernation (else only the owner's). */
  publicWake: z.boolean(),
  createdAt: z.string(),
  updatedAt: z.string(),
});
export type Box = z.infer<typeof Box>;
