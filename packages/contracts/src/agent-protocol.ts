import { z } from "zod";
import { BoxEnv } from "./box.ts";
import { DEFAULT_GITHUB_WEB_URL, GitAuthor, GitHubWebUrl, RepoFullName } from "./github.ts";
import { JOB_ACTIONS, type JobAction, JobErrorCode, STEP_NAMES } from "./job.ts";

/** Payload of every box job: everything the agent needs, so it never calls back for intent. */
export const BoxJobPayload = z.object({
  slug: z.string(),
  template: z.string(),
  templateVersion: z.string(),
  vcpu: z.number().int().positive(),
  memoryMb: z.number().int().positive(),
  diskGb: z.number().int().positive(),
  env: BoxEnv,
  owner: z.string(),
  /** Site URL is public unless false; code and dev ports are always owner-only. */
  sitePublic: z.boolean().default(true),
  /** Anyone's request to the public site may wake the box from hibernation (else only the owner's). */
  publicWake: z.boolean().default(false),
  /**
   * The GitHub repository (`owner/name`) the box clones into its workspace on first start,
   * or null. Checked again here: it reaches the guest's shell (images/common/rootfs/usr/local/bin/doppio-clone).
   */
  repo: RepoFullName.nullable().default(null),
  /**
   * GitHub's web origin (the control plane's GitHub App config: github.com or a GitHub
   * Enterprise Server): the box's Git credential helper answers for it alone and clones from
   * it. Checked again here and in the guest: it reaches the guest's shell and gitconfig.
   */
  githubUrl: GitHubWebUrl.default(DEFAULT_GITHUB_WEB_URL),
  /** The owner's git commit author (name, email), or null: git then asks the user as anywhere. */
  gitAuthor: GitAuthor.nullable().default(null),
});
export type BoxJobPayload = z.infer<typeof BoxJobPayload>;

export const TemplateJobPayload = z.object({
  template: z.string(),
  templateVersion: z.string(),
});
export type TemplateJobPayload = z.infer<typeof TemplateJobPayload>;

/** What a template's golden snapshot is on a host (heartbeats, the control plane's table). */
export const GOLDEN_STATUSES = ["missing", "building", "ready", "stale", "failed"] as const;
export type GoldenStatus = (typeof GOLDEN_STATUSES)[number];

/** create, start, stop, reset: the box's address on its host, which the control plane records. */
const BoxJobResult = z.object({ ip: z.ipv4() });
const DeleteJobResult = z.object({});
/**
 * hibernate: the address it keeps and the size of the memory file it left on the host. A box
 * whose VMM had already exited (guest crash, VMM killed) has no memory to keep: the agent
 * stops it plainly (disks kept, TAP released) and says why in `memoryLost`, with
 * `memoryFileBytes` 0; the box then settles as `stopped`, which its desired state allows.
 */
const HibernateJobResult = BoxJobResult.extend({
  memoryFileBytes: z.number().int().nonnegative(),
  memoryLost: z.string().min(1).max(500).optional(),
});
const GoldenJobResult = z.object({
  template: z.string(),
  version: z.string(),
  /** The image the golden was built from. */
  imageVersion: z.string(),
  status: z.literal("ready"),
  builtAt: z.string().nullable(),
});
/** An image build as the agent's image builder reports it. */
export const BuiltImage = z.object({
  template: z.string(),
  version: z.string(),
  inputsHash: z.string(),
  /** True when a build of the same inputs was already in the store. */
  cached: z.boolean(),
  diskBytes: z.number().int().nonnegative(),
  ms: z.number().nonnegative(),
});
export type BuiltImage = z.infer<typeof BuiltImage>;
const ImageJobResult = BuiltImage.extend({
  imageVersion: z.string(),
  /** The golden was not ready from this image, so the job built it. */
  goldenRebuilt: z.boolean(),
  golden: z.object({
    status: z.enum(GOLDEN_STATUSES),
    version: z.string().nullable(),
    imageVersion: z.string().nullable(),
  }),
  goldenStale: z.boolean(),
});

/**
 * Each action's contract, discriminated on `action`: what the control plane sends (payload)
 * and what the agent answers when the job succeeds (result). Both ends parse with these.
 */
export const JobSpec = z.discriminatedUnion("action", [
  z.object({ action: z.literal("create"), payload: BoxJobPayload }),
  z.object({ action: z.literal("start"), payload: BoxJobPayload }),
  z.object({ action: z.literal("stop"), payload: BoxJobPayload }),
  z.object({ action: z.literal("reset"), payload: BoxJobPayload }),
  z.object({ action: z.literal("delete"), payload: BoxJobPayload }),
  z.object({ action: z.literal("hibernate"), payload: BoxJobPayload }),
  z.object({ action: z.literal("build_golden"), payload: TemplateJobPayload }),
  z.object({ action: z.literal("build_image"), payload: TemplateJobPayload }),
]);
export type JobSpec = z.infer<typeof JobSpec>;
export const JobSuccess = z.discriminatedUnion("action", [
  z.object({ action: z.literal("create"), ok: z.literal(true), data: BoxJobResult }),
  z.object({ action: z.literal("start"), ok: z.literal(true), data: BoxJobResult }),
  z.object({ action: z.literal("stop"), ok: z.literal(true), data: BoxJobResult }),
  z.object({ action: z.literal("reset"), ok: z.literal(true), data: BoxJobResult }),
  z.object({ action: z.literal("delete"), ok: z.literal(true), data: DeleteJobResult }),
  z.object({ action: z.literal("hibernate"), ok: z.literal(true), data: HibernateJobResult }),
  z.object({ action: z.literal("build_golden"), ok: z.literal(true), data: GoldenJobResult }),
  z.object({ action: z.literal("build_image"), ok: z.literal(true), data: ImageJobResult }),
]);
type JobSuccess = z.infer<typeof JobSuccess>;
/** The payload as a handler receives it (defaults applied). */
export type JobPayloadOf<A extends JobAction> = Extract<JobSpec, { action: A }>["payload"];
/** The payload as the control plane may write it (defaults may be left out). */
export type JobPayloadInput<A extends JobAction> = Extract<z.input<typeof JobSpec>, { action: A }>["payload"];
export type JobResultOf<A extends JobAction> = Extract<JobSuccess, { action: A }>["data"];
/** A failed job's result, whatever its action: a code for programs, a message for people. */
export const JobFailure = z.object({
  action: z.enum(JOB_ACTIONS),
  ok: z.literal(false),
  code: JobErrorCode,
  error: z.string().min(1).max(4000),
  /**
   * The box's VM runs on and serves as before the job (a hibernate whose save failed while
   * its VMM lived on): the box is running again, with the failure as its reason.
   */
  boxRunning: z.literal(true).optional(),
});
type JobFailure = z.infer<typeof JobFailure>;
export type JobOutcome = JobSuccess | JobFailure;

// Every action has a payload and a result in the unions above (a compile-time check).
type Covered<T extends { action: JobAction }> = [Exclude<JobAction, T["action"]>] extends [never]
  ? true
  : never;
const everyActionCovered: Covered<JobSpec> & Covered<JobSuccess> = true;
void everyActionCovered;

/**
 * Reads a `result` event as the typed outcome of a job of `action`. The agent checks its
 * own results with this before they enter its outbox, and the control plane checks what it
 * receives: a result that breaks its contract is reported as `problems`, never thrown.
 */
export function parseJobResult(
  action: JobAction,
  result: { ok: boolean; data?: unknown; code?: string; error?: string; boxRunning?: boolean },
): { ok: true; outcome: JobOutcome } | { ok: false; problems: string[] } {
  const { code, error, boxRunning } = result;
  const parsed = result.ok
    ? JobSuccess.safeParse({ action, ok: true, data: result.data ?? {} })
    : JobFailure.safeParse({ action, ok: false, code, error, ...(boxRunning ? { boxRunning } : {}) });
  if (parsed.success) return { ok: true, outcome: parsed.data };
  return {
    ok: false,
    problems: parsed.error.issues.map((i) => `${i.path.join(".") || "(result)"}: ${i.message}`),
  };
}

/**
 * Requests one host may have in a control-plane replica's handlers at once besides its claim
 * long-poll (one per replica, held by its claim seat). The agent opens no more connections
 * than this plus one for its claim, so it never meets the limit; a host over it is refused
 * (429) at once (apps/api/src/services/agent-in-flight.ts).
 */
export const AGENT_MAX_IN_FLIGHT = 8;

/** A job as handed to an agent by `POST /agent/v1/jobs/claim`. */
export const ClaimedJob = z.object({
  id: z.string(),
  action: z.enum(JOB_ACTIONS),
  box: z.string().nullable(),
  payload: z.record(z.string(), z.unknown()),
  attempt: z.number().int(),
  leaseExpiresAt: z.string(),
});
export type ClaimedJob = z.infer<typeof ClaimedJob>;

export const ClaimRequest = z.strictObject({
  /** How many jobs the agent can take now. */
  max: z.number().int().min(1).max(64).default(1),
  /** How long to hold the request open when nothing is pending. */
  waitMs: z.number().int().min(0).max(30_000).default(25_000),
});
export const ClaimResponse = z.object({ jobs: z.array(ClaimedJob) });
export type ClaimResponse = z.infer<typeof ClaimResponse>;

/**
 * Events an agent reports for a job, each with a per-job monotonic `seq` starting at 1.
 * The control plane applies an event once; a `seq` at or below the last applied is
 * acknowledged and ignored; nothing changes a job after its `result`.
 */
export const JobEvent = z.discriminatedUnion("type", [
  z.object({ seq: z.number().int().positive(), at: z.string(), type: z.literal("started") }),
  z.object({
    seq: z.number().int().positive(),
    at: z.string(),
    type: z.literal("step"),
    name: z.enum(STEP_NAMES),
    status: z.enum(["running", "succeeded", "failed"]),
    detail: z.string().max(2000).optional(),
  }),
  z.object({
    seq: z.number().int().positive(),
    at: z.string(),
    type: z.literal("log"),
    line: z.string().max(8000),
  }),
  z.object({
    seq: z.number().int().positive(),
    at: z.string(),
    type: z.literal("result"),
    ok: z.boolean(),
    /** Failed: the message and its code. Loose here: parseJobResult checks the contract. */
    error: z.string().max(4000).optional(),
    code: z.string().max(64).optional(),
    /** Failed: the box's VM runs on as before the job (JobFailure.boxRunning). */
    boxRunning: z.boolean().optional(),
    /** Succeeded: the action's result (JobSuccess), e.g. `{ ip }` for a create. */
    data: z.record(z.string(), z.unknown()).optional(),
  }),
]);
export type JobEvent = z.infer<typeof JobEvent>;

export const JobEventsRequest = z.strictObject({ events: z.array(JobEvent).min(1).max(500) });
export const JobEventsResponse = z.object({ applied: z.number().int(), lastSeq: z.number().int() });

/** hibernated: no VMM, a complete memory file on the host that a start resumes. */
export const VM_STATES = ["running", "stopped", "hibernated", "exited", "gone"] as const;
export type VmState = (typeof VM_STATES)[number];

/** One template's warm pool on a host (apps/agent/src/pool/warm.ts). */
export const WarmPoolState = z.object({
  template: z.string().max(64),
  target: z.number().int().nonnegative(),
  ready: z.number().int().nonnegative(),
  filling: z.number().int().nonnegative(),
  /** What one clone takes on the host (its data volume, its guest memory); absent from older agents. */
  diskGb: z.number().int().nonnegative().optional(),
  memoryMb: z.number().int().nonnegative().optional(),
});
export type WarmPoolState = z.infer<typeof WarmPoolState>;

/** The most parked clones one template's pool may hold on a host. */
export const WARM_POOL_SIZE_MAX = 32;
/** Warm-pool size per template, as the control plane's server settings say. */
export const WarmPoolSizes = z.record(z.string().max(64), z.number().int().min(0).max(WARM_POOL_SIZE_MAX));
export type WarmPoolSizes = z.infer<typeof WarmPoolSizes>;

export const Heartbeat = z.strictObject({
  version: z.string().max(64),
  backend: z.enum(["qemu", "firecracker"]),
  capacity: z.object({
    vcpu: z.number().int().nonnegative(),
    memoryMb: z.number().int().nonnegative(),
    diskGb: z.number().int().nonnegative(),
  }),
  vms: z
    .array(
      z.object({
        slug: z.string(),
        state: z.enum(VM_STATES),
        ip: z.string().nullable(),
        /** Last request or open connection the host's edge saw for the box (idle hibernation). */
        lastActiveAt: z.iso.datetime({ offset: true }).nullable().optional(),
      }),
    )
    .max(10_000),
  golden: z.record(
    z.string(),
    z.object({
      status: z.enum(GOLDEN_STATUSES),
      version: z.string().nullable(),
    }),
  ),
  /** Ids of jobs the agent holds (queued or running): their leases are extended. */
  jobs: z.array(z.string()).max(10_000).default([]),
  /** The warm pool per template: clones ready to claim and being made, and the size aimed at. */
  pool: z.array(WarmPoolState).max(256).optional(),
});
export type Heartbeat = z.infer<typeof Heartbeat>;

export const HeartbeatResponse = z.object({
  /** Boxes the control plane believes are on this host, with their desired state. */
  boxes: z.array(
    z.object({
      slug: z.string(),
      desiredState: z.enum(["running", "stopped", "deleted"]),
      /** Changed without a job (`PATCH /api/v1/boxes/:slug/idle`): the host applies it from here. */
      publicWake: z.boolean().optional(),
    }),
  ),
  drift: z.array(z.object({ slug: z.string(), expected: z.string(), observed: z.string() })),
  /** SPKI PEM of the control plane's key: the agent verifies private-URL hand-off tokens with it. */
  accessPublicKey: z.string(),
  /** Signed-out control-plane sessions (`sid` claims): the edge refuses their box-access cookies. */
  endedSessions: z.array(z.string().max(64)).default([]),
  /** The server's warm-pool sizes per template; absent: the agent keeps its configured ones. */
  warmPool: WarmPoolSizes.optional(),
});
export type HeartbeatResponse = z.infer<typeof HeartbeatResponse>;

/**
 * `POST /agent/v1/boxes/:slug/git-credential`: a short-lived Git credential for a box on
 * the calling server (the box asks its agent's metadata service, which asks here). 404
 * when the box is not on this server or no credential can be issued for its owner.
 */
export const GitCredentialRequest = z.strictObject({});
export const GitCredential = z.object({
  /** Git's username for HTTPS (GitHub App installation tokens use `x-access-token`). */
  username: z.string().min(1),
  token: z.string().min(1),
  /** ISO 8601; the agent reuses a credential until shortly before this. */
  expiresAt: z.iso.datetime({ offset: true }),
});
export type GitCredential = z.infer<typeof GitCredential>;
