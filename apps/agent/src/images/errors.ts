import { CodedError } from "../coded-error.ts";

const IMAGE_ERROR_CODES = [
  "unknown_template",
  /** The recipe needs a network (PyPI, GitHub) this host cannot reach; nothing was built. */
  "network_unreachable",
  /** A toolchain requirement cannot be met (e.g. the Node or Python a Frappe branch needs). */
  "toolchain_unsupported",
  "build_failed",
  /** A version directory already holds a build of other inputs (images are never replaced). */
  "version_conflict",
  "invalid_version",
] as const;
export type ImageErrorCode = (typeof IMAGE_ERROR_CODES)[number];

export class ImageError extends CodedError<ImageErrorCode> {
  override readonly name = "ImageError";
}
