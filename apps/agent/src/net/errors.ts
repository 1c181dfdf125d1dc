import { CodedError } from "../coded-error.ts";

const NETWORK_ERROR_CODES = [
  /** A bridge/TAP/NAT command failed. */
  "command_failed",
  /** Config the host network cannot use (bad CIDR, name over 15 characters). */
  "invalid_config",
] as const;
export type NetworkErrorCode = (typeof NETWORK_ERROR_CODES)[number];

export class NetworkError extends CodedError<NetworkErrorCode> {
  override readonly name = "NetworkError";
}
