export const NETWORK_ERROR_CODES = [
  /** A bridge/TAP/NAT command failed. */
  "command_failed",
  /** Config the host network cannot use (bad CIDR, name over 15 characters). */
  "invalid_config",
] as const;
export type NetworkErrorCode = (typeof NETWORK_ERROR_CODES)[number];

export class NetworkError extends Error {
  override readonly name = "NetworkError";
  readonly code: NetworkErrorCode;

  constructor(code: NetworkErrorCode, message: string, cause?: unknown) {
    super(message, cause === undefined ? undefined : { cause });
    this.code = code;
  }
}
