import { CodedError } from "../coded-error.ts";

const EDGE_ERROR_CODES = [
  /** The Caddy admin API could not be reached at all. */
  "caddy_unreachable",
  /** The admin API answered with a non-2xx status. */
  "caddy_rejected",
  /** The admin API answered with something that is not the JSON we expected. */
  "caddy_bad_response",
  /** The agent's edge key file exists but cannot be used. */
  "bad_key_file",
] as const;
export type EdgeErrorCode = (typeof EDGE_ERROR_CODES)[number];

export class EdgeError extends CodedError<EdgeErrorCode> {
  override readonly name = "EdgeError";
}
