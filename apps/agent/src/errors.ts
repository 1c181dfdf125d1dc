import { CodedError } from "./coded-error.ts";

/** The closed set of failures the agent core reports; the message is safe to show a user. */
const AGENT_ERROR_CODES = [
  "config_invalid",
  "ip_pool_exhausted",
  "unknown_action",
  "invalid_payload",
  "box_not_on_host",
  /** Only a running box can hibernate. */
  "not_running",
  "no_golden",
  "unknown_template",
  "not_available",
  "control_plane_rejected",
  "control_plane_unreachable",
  /** The host's filesystem had no space left (ENOSPC) for what the job writes. */
  "disk_full",
] as const;
export type AgentErrorCode = (typeof AGENT_ERROR_CODES)[number];

export class AgentError extends CodedError<AgentErrorCode> {
  override readonly name = "AgentError";
}

const runsOn = new WeakSet<object>();

/**
 * Marks the error a box action failed with as one after which the box's VM runs on and
 * serves as before (its routes are back): the job's result says so (JobFailure.boxRunning).
 */
export function boxRunsOn<E>(err: E): E {
  if (typeof err === "object" && err !== null) runsOn.add(err);
  return err;
}

export function ranOn(err: unknown): boolean {
  return typeof err === "object" && err !== null && runsOn.has(err);
}

/** The message a job result carries: ours verbatim, anything else by its message. */
export function failureMessage(err: unknown): string {
  if (err instanceof Error) return err.message || err.name;
  return String(err);
}
