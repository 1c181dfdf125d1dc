import { CodedError } from "../../coded-error.ts";

const QEMU_ERROR_CODES = [
  /** QEMU answered a QMP command with an error. */
  "qmp_error",
  /** The QMP socket did not answer (process gone, socket missing, malformed reply). */
  "qmp_unreachable",
  "timeout",
  "spawn_failed",
  /** The guest reported a failure or never reported ready. */
  "guest_not_ready",
  "not_found",
  "golden_missing",
  "golden_build_failed",
  "image_missing",
  "disk_failed",
  "migration_failed",
  "invalid_spec",
  /** Only a running box can hibernate. */
  "not_running",
  /** The saved memory did not load; it is discarded. */
  "resume_failed",
] as const;
export type QemuErrorCode = (typeof QEMU_ERROR_CODES)[number];

export class QemuError extends CodedError<QemuErrorCode> {
  override readonly name = "QemuError";
}

/**
 * The VMM process ended before its guest reported ready: killed (an operator, the OOM
 * killer) or crashed. Unlike a guest that never reports ready while its VMM runs (a broken
 * image), the same launch may succeed again (vmm/relaunch.ts).
 */
export class VmmExitedError extends QemuError {
  constructor(message: string, opts: { cause?: unknown } = {}) {
    super("guest_not_ready", message, opts);
  }
}
