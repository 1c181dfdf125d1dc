import { z } from "zod";

/**
 * What a user may ask of a box; each is one agent job. `hibernate` keeps the box's memory
 * (processes, open files) in a file on its host and stops the VMM; `start` of a hibernated
 * box resumes that memory, and `stop` of one discards it.
 */
export const BOX_ACTIONS = ["create", "start", "stop", "reset", "delete", "hibernate"] as const;
export type BoxAction = (typeof BOX_ACTIONS)[number];

/** Jobs about a template on one host rather than about a box. */
const TEMPLATE_ACTIONS = ["build_golden", "build_image"] as const;
export type TemplateAction = (typeof TEMPLATE_ACTIONS)[number];

/** Every job an agent runs: the box actions and the template actions, nothing else. */
export const JOB_ACTIONS = [...BOX_ACTIONS, ...TEMPLATE_ACTIONS] as const;
export type JobAction = (typeof JOB_ACTIONS)[number];

export function isBoxAction(action: string): action is BoxAction {
  return (BOX_ACTIONS as readonly string[]).includes(action);
}

export function isTemplateAction(action: string): action is TemplateAction {
  return (TEMPLATE_ACTIONS as readonly string[]).includes(action);
}

export function isJobAction(action: string): action is JobAction {
  return (JOB_ACTIONS as readonly string[]).includes(action);
}

/**
 * pending: waiting for the agent; delivered: handed out under a lease, not yet acknowledged
 * as started; running: the agent reported progress; succeeded/failed: final, never change.
 */
const IN_FLIGHT = ["pending", "delivered", "running"] as const;
const FINAL = ["succeeded", "failed"] as const;
export const JOB_STATUSES = [...IN_FLIGHT, ...FINAL] as const;
export type JobStatus = (typeof JOB_STATUSES)[number];
export const FINAL_JOB_STATUSES: readonly JobStatus[] = FINAL;

export function isFinalJobStatus(status: JobStatus): boolean {
  return FINAL_JOB_STATUSES.includes(status);
}

/**
 * Why a job failed, as a code a program can act on (the message says it to a person). The
 * agent sends the code of the error that ended the job: each of its error classes has a
 * closed set (apps/agent/src/errors.ts, apps/agent/src/images/errors.ts,
 * apps/agent/src/vmm/qemu/errors.ts and their siblings). The protocol adds its own below.
 * Checked for shape only, so an agent with a code the control plane has not seen yet still
 * reports its failure.
 */
export const JobErrorCode = z
  .string()
  .max(64)
  .regex(/^[a-z][a-z0-9_]*$/, "error codes are lower-case snake_case");
export type JobErrorCode = z.infer<typeof JobErrorCode>;

/** Codes the job protocol itself gives, at whichever end the failure is found. */
const PROTOCOL_JOB_ERROR_CODES = [
  /** The result does not match its action's result schema (agent-protocol.ts). */
  "invalid_result",
  /** Handed out several times and never acknowledged (apps/api/src/services/jobs.ts). */
  "not_acknowledged",
  /** The agent stopped reporting progress while running it. */
  "lease_expired",
  /** The error that ended the job carries no code of its own. */
  "internal",
] as const;
export type ProtocolJobErrorCode = (typeof PROTOCOL_JOB_ERROR_CODES)[number];

/** A failure as one line of text (CLI, logs): the message, then its code. */
export function failureText(error: string | null, code: string | null): string | null {
  if (!error) return code;
  return code ? `${error} [${code}]` : error;
}

/** One typed list of step names shared by the agent (which emits them) and the UIs (which label them). */
export const STEP_NAMES = [
  "check_state",
  "allocate_ip",
  "prepare_disks",
  "setup_network",
  "restore_vm",
  "boot_vm",
  "apply_identity",
  "wait_ready",
  "add_routes",
  "stop_vm",
  "remove_routes",
  "teardown_network",
  "remove_disks",
  "release_ip",
  "build_rootfs",
  "write_image",
  "snapshot_vm",
  "hibernate_vm",
  "resume_vm",
  "claim_clone",
] as const;
export type StepName = (typeof STEP_NAMES)[number];

export const STEP_LABELS: Record<StepName, string> = {
  check_state: "Checking current state",
  allocate_ip: "Allocating an address",
  prepare_disks: "Preparing disks",
  setup_network: "Setting up the network",
  restore_vm: "Restoring from the golden snapshot",
  boot_vm: "Booting the VM",
  apply_identity: "Applying the box identity",
  wait_ready: "Waiting for services",
  add_routes: "Publishing URLs",
  stop_vm: "Stopping the VM",
  remove_routes: "Removing URLs",
  teardown_network: "Removing the network",
  remove_disks: "Removing disks",
  release_ip: "Releasing the address",
  build_rootfs: "Building the root filesystem",
  write_image: "Writing the disk image",
  snapshot_vm: "Taking the golden snapshot",
  hibernate_vm: "Saving the box's memory",
  resume_vm: "Resuming from the saved memory",
  claim_clone: "Taking a ready clone from the warm pool",
};

export const JobStep = z.object({
  name: z.enum(STEP_NAMES),
  status: z.enum(["running", "succeeded", "failed"]),
  startedAt: z.string(),
  finishedAt: z.string().nullable(),
  detail: z.string().nullable().optional(),
});
export type JobStep = z.infer<typeof JobStep>;

export const Job = z.object({
  id: z.string(),
  action: z.enum(JOB_ACTIONS),
  box: z.string().nullable(),
  server: z.string(),
  status: z.enum(JOB_STATUSES),
  attempts: z.number().int(),
  steps: z.array(JobStep),
  error: z.string().nullable(),
  /** Code of the failure (see JobErrorCode); null unless the job failed. */
  errorCode: JobErrorCode.nullable(),
  result: z.record(z.string(), z.unknown()).nullable(),
  /** The last 64 KiB of log lines the agent reported for this job. */
  log: z.string(),
  createdAt: z.string(),
  startedAt: z.string().nullable(),
  finishedAt: z.string().nullable(),
});
export type Job = z.infer<typeof Job>;
