import type { ErrorBody } from "@doppio/contracts";

/** Anything the client throws besides the caller's own abort. */
export class DoppioError extends Error {
  override name = "DoppioError";
}

/**
 * The control plane (or something in front of it) refused: `error` is the API's one error
 * shape, or null when the answer was not in it (a proxy's error page, say).
 */
export class ApiError extends DoppioError {
  override name = "ApiError";
  constructor(
    readonly status: number,
    readonly error: ErrorBody["error"] | null,
  ) {
    super(error?.message ?? `unexpected HTTP ${status}`);
  }

  get code(): ErrorBody["error"]["code"] | null {
    return this.error?.code ?? null;
  }
}

/** No answer at all: DNS, refused connection, TLS, timeout. The original error is `cause`. */
export class NetworkError extends DoppioError {
  override name = "NetworkError";
}

/** An event stream that was open and broke off mid-way; the original error is `cause`. */
export class StreamBrokenError extends NetworkError {
  override name = "StreamBrokenError";
}

/** A 2xx answer that does not fit the route's schema: not a doppiobox control plane, or another version. */
export class UnexpectedAnswerError extends DoppioError {
  override name = "UnexpectedAnswerError";
  constructor(
    readonly method: string,
    readonly path: string,
    readonly status: number,
    options?: { cause?: unknown },
  ) {
    super(`unexpected answer to ${method} ${path} (HTTP ${status})`, options);
  }
}

/** Worth retrying: no answer, or a failure on the server's side. */
export function isTransient(err: unknown): boolean {
  return err instanceof NetworkError || (err instanceof ApiError && err.status >= 500);
}
