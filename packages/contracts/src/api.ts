import { z } from "zod";
import { WarmPoolSizes } from "./agent-protocol.ts";
import { BOX_SIZES, Box, BoxSize } from "./box.ts";
import { Job } from "./job.ts";

export const PASSWORD_MIN = 10;
export const PASSWORD_MAX = 256;

export const EMAIL_MAX = 254;
/**
 * Linear: the domain's labels cannot contain the dots between them, so there is one way to
 * match. (`[^\s@]+\.[^\s@]+` backtracked quadratically: 7 s for a 64 KB "a@....@".)
 */
const EMAIL_RE = /^[^\s@]+@[^\s@.]+(?:\.[^\s@.]+)+$/;

// Every string field checks its length first and stops there (`abort`): no pattern ever
// runs on a value longer than the field allows, whatever the body limit.
export const Email = z
  .string()
  .trim()
  .max(EMAIL_MAX, { abort: true })
  .toLowerCase()
  .regex(EMAIL_RE, "must be an email address");

export const SignupRequest = z.strictObject({
  email: Email,
  password: z
    .string()
    .min(PASSWORD_MIN, `password must be at least ${PASSWORD_MIN} characters`)
    .max(PASSWORD_MAX),
  name: z.string().trim().min(1).max(100).optional(),
});
export const LoginRequest = z.strictObject({ email: Email, password: z.string().min(1).max(PASSWORD_MAX) });

export const ROLES = ["user", "admin"] as const;
export type Role = (typeof ROLES)[number];

export const Me = z.object({
  id: z.string(),
  email: z.string(),
  name: z.string().nullable(),
  role: z.enum(ROLES),
  /** Whether the email address is verified (trial credit comes with verification). */
  emailVerified: z.boolean(),
  team: z.object({ id: z.string(), name: z.string() }),
});
export type Me = z.infer<typeof Me>;

export const CreateTokenRequest = z.strictObject({
  name: z.string().trim().min(1).max(100),
  /** When the token stops working (ISO 8601 with offset, in the future); none: until revoked. */
  expiresAt: z
    .string()
    .max(40, { abort: true })
    .pipe(z.iso.datetime({ offset: true }))
    .optional(),
});
export type CreateTokenRequest = z.infer<typeof CreateTokenRequest>;
export const ApiToken = z.object({
  id: z.string(),
  name: z.string(),
  prefix: z.string(),
  createdAt: z.string(),
  lastUsedAt: z.string().nullable(),
  expiresAt: z.string().nullable(),
});
export type ApiToken = z.infer<typeof ApiToken>;
/** Returned once at creation; the secret is never shown again. */
export const CreatedToken = ApiToken.extend({ token: z.string() });

export const Template = z.object({
  name: z.string(),
  title: z.string(),
  description: z.string(),
  version: z.string(),
  defaultSize: BoxSize,
  /** Server names where a golden snapshot of this version is ready. */
  readyOn: z.array(z.string()),
});
export type Template = z.infer<typeof Template>;

/**
 * Only `active` servers take new boxes. `draining`: its boxes keep running and take their
 * actions, nothing new lands there; `disabled`: neither, its agent gets no jobs until it is
 * active again (queued ones wait). `error`: its last Prepare or Deploy play failed (or a Prepare
 * was cancelled); `statusMessage` holds the play's error, and a new play can run from it.
 */
export const SERVER_STATUSES = [
  "pending",
  "preparing",
  "active",
  "draining",
  "disabled",
  "error",
  "archived",
] as const;
export type ServerStatus = (typeof SERVER_STATUSES)[number];
/** What an operator does to a registered server's service, and the status each sets. */
export const SERVER_ACTIONS = ["drain", "disable", "activate"] as const;
export type ServerAction = (typeof SERVER_ACTIONS)[number];
export const SERVER_ACTION_STATUS: Record<ServerAction, ServerStatus> = {
  drain: "draining",
  disable: "disabled",
  activate: "active",
};
export const ServerActionRequest = z.strictObject({ action: z.enum(SERVER_ACTIONS) });
export type ServerActionRequest = z.infer<typeof ServerActionRequest>;
export const BACKENDS = ["qemu", "firecracker"] as const;
export type Backend = (typeof BACKENDS)[number];

const ServerName = z
  .string()
  .min(2)
  .max(40, { abort: true })
  .regex(/^[a-z][a-z0-9-]*[a-z0-9]$/, "server names are lowercase letters, digits and hyphens");
/** Each dot-separated label: 1–63 letters, digits and inner hyphens (checked per label: linear). */
const DNS_LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;
const Domain = z
  .string()
  .min(3)
  .max(200, { abort: true })
  .refine((d) => d.split(".").every((label) => DNS_LABEL.test(label)), "must be a DNS name");

export const RegisterServerRequest = z.strictObject({
  name: ServerName,
  domain: Domain,
  backend: z.enum(BACKENDS).default("firecracker"),
  capacity: z.strictObject({
    vcpu: z.number().int().positive().max(4096),
    memoryMb: z
      .number()
      .int()
      .positive()
      .max(64 * 1024 * 1024),
    diskGb: z
      .number()
      .int()
      .positive()
      .max(1024 * 1024),
  }),
  /** URL scheme and port the box URLs use (local mode uses http and a high port). */
  publicScheme: z.enum(["https", "http"]).default("https"),
  publicPort: z.number().int().min(1).max(65535).optional(),
  status: z.enum(SERVER_STATUSES).default("active"),
});
export type RegisterServerRequest = z.infer<typeof RegisterServerRequest>;

export const Server = z.object({
  name: z.string(),
  domain: z.string(),
  status: z.enum(SERVER_STATUSES),
  /** Why the server is in `error`: the failing task of its last play. */
  statusMessage: z.string().nullable(),
  backend: z.enum(BACKENDS),
  capacity: z.object({ vcpu: z.number(), memoryMb: z.number(), diskGb: z.number() }),
  used: z.object({ vcpu: z.number(), memoryMb: z.number(), diskGb: z.number() }),
  /**
   * What its warm pools hold beside `used` (placement counts both): each pool at the larger
   * of its size and the clones it has, each clone its data volume and guest memory.
   */
  reserved: z.object({ vcpu: z.number(), memoryMb: z.number(), diskGb: z.number() }),
  agentVersion: z.string().nullable(),
  lastHeartbeatAt: z.string().nullable(),
  /**
   * Set when the agent has been silent longer than the grace period: its boxes show
   * `unknown` (their disks are on that host, so they are not re-created elsewhere) until it
   * heartbeats again.
   */
  unreachableSince: z.string().nullable(),
  golden: z.record(z.string(), z.object({ status: z.string(), version: z.string().nullable() })),
  /**
   * The warm pool per template: `size` as set here (null: the agent's own configuration
   * decides), and as the agent last reported: the size it aims at, clones ready to claim
   * and clones being made.
   */
  warmPool: z.array(
    z.object({
      template: z.string(),
      size: z.number().int().nullable(),
      target: z.number().int(),
      ready: z.number().int(),
      filling: z.number().int(),
    }),
  ),
});
export type Server = z.infer<typeof Server>;
/** `PATCH /api/v1/servers/:name/warm-pool`: clones per template (0 empties it); templates left out keep theirs. */
export const SetWarmPoolRequest = z.strictObject({ sizes: WarmPoolSizes });
export type SetWarmPoolRequest = z.infer<typeof SetWarmPoolRequest>;
export const RegisteredServer = Server.extend({ agentToken: z.string() });

/** `{box, job}`: what creating a box or acting on one answers (the box as it is now, the job queued). */
export const BoxWithJob = z.object({ box: Box, job: Job });
export type BoxWithJob = z.infer<typeof BoxWithJob>;

// List answers are objects, never bare arrays, so a field can be added without breaking clients.
export const BoxList = z.object({ boxes: z.array(Box) });
export const JobList = z.object({ jobs: z.array(Job) });
export const TemplateList = z.object({ templates: z.array(Template) });
export const TokenList = z.object({ tokens: z.array(ApiToken) });
export const ServerList = z.object({ servers: z.array(Server) });
export const RotatedAgentToken = z.object({ agentToken: z.string() });
export const TemplateJobRequest = z.strictObject({ template: z.string().min(1).max(64) });

export const SIZES = Object.entries(BOX_SIZES).map(([name, s]) => ({ name, ...s }));
