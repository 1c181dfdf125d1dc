import { CodedError } from "../../coded-error.ts";

const FIRECRACKER_ERROR_CODES = [
  /** Firecracker answered with a non-2xx status; `faultMessage` holds its `fault_message`. */
  "api_rejected",
  /** The API socket did not answer (process gone, socket missing, malformed reply). */
  "api_unreachable",
  "timeout",
  "spawn_failed",
  /** The box has no artifacts on this host. */
  "not_found",
  "golden_missing",
  "golden_build_failed",
  "disk_failed",
  "prerequisite_missing",
  "no_uid_free",
  /** The spec asks for something this backend cannot do (e.g. no TAP). */
  "unsupported",
  /** Only a running box can hibernate. */
  "not_running",
  /** The box's saved memory did not load; it is discarded. */
  "resume_failed",
  /** The VMM process ended before its guest was ready (killed, crashed): a launch may be tried again. */
  "vmm_exited",
  /** The VMM exited before the guest was ready in every launch attempt (vmm/relaunch.ts). */
  "guest_not_ready",
] as const;
export type FirecrackerErrorCode = (typeof FIRECRACKER_ERROR_CODES)[number];

export class FirecrackerError extends CodedError<FirecrackerErrorCode> {
  override readonly name = "FirecrackerError";
  /** HTTP status and method/path of a rejected API call, when there was one. */
  readonly status: number | null;
  readonly request: string | null;
  readonly faultMessage: string | null;

  constructor(
    code: FirecrackerErrorCode,
    message: string,
    opts: { cause?: unknown; status?: number; request?: string; faultMessage?: string } = {},
  ) {
    super(code, message, { cause: opts.cause });
    this.status = opts.status ?? null;
    this.request = opts.request ?? null;
    this.faultMessage = opts.faultMessage ?? null;
  }
}
