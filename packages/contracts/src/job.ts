import { z } from "zod";

export const JOB_ACTIONS = [
  "create",
  "start",
  "stop",
  "delete",
  "reset",
  "build_golden",
  "build_image",
] as const;
export type JobAction = (typeof JOB_ACTIONS)[number];

/**
 * pending: waiting for the agent; delivered: handed out under a lease, not yet acknowledged
 * as started; running: the agent reported progress; succeeded/failed: final, never change.
 */
export const JOB_STATUSES = ["pending", "delivered", "running", "succeeded", "failed"] as const;
export type JobStatus = (typeof JOB_STATUSES)[number];
export const FINAL_JOB_STATUSES: readonly JobStatus[] = ["succeeded", "failed"];

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
  result: z.record(z.string(), z.unknown()).nullable(),
  /** The last 64 KiB of log lines the agent reported for this job. */
  log: z.string(),
  createdAt: z.string(),
  startedAt: z.string().nullable(),
  finishedAt: z.string().nullable(),
});
export type Job = z.infer<typeof Job>;
