/**
 * Every failure the CLI reports maps to one kind, and each kind to one exit code, so
 * scripts can tell "the box failed" from "you typed it wrong" from "the network is down".
 */
export const EXIT_CODES = {
  failed: 1,
  usage: 2,
  unreachable: 3,
  interrupted: 130,
} as const;
export type CliErrorKind = keyof typeof EXIT_CODES;

export class CliError extends Error {
  constructor(
    readonly kind: CliErrorKind,
    message: string,
    /** One line telling the user what to do next. */
    readonly hint?: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = "CliError";
  }

  get exitCode(): number {
    return EXIT_CODES[this.kind];
  }
}

export const usageError = (message: string, hint?: string) => new CliError("usage", message, hint);
export const failed = (message: string, hint?: string) => new CliError("failed", message, hint);
