/** What an agent error may carry besides its code and message. */
export interface CodedErrorOptions {
  cause?: unknown;
  /** Structured facts safe to show next to the message (they reach job results and logs). */
  details?: Record<string, unknown>;
}

/**
 * The base of every agent error class: a code from the class's closed set, a message safe
 * to show a user, and an optional cause and details. Callers (the job runner, logs) read
 * `code` from any agent error the same way.
 */
export class CodedError<Code extends string> extends Error {
  readonly code: Code;
  readonly details: Record<string, unknown> | undefined;

  constructor(code: Code, message: string, opts: CodedErrorOptions = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.code = code;
    this.details = opts.details;
  }
}
