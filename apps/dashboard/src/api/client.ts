import type { RouteInput, RouteName, RouteOutput, Routes } from "@doppio/contracts";
import { DoppioClient, NetworkError, ApiError as SdkApiError, UnexpectedAnswerError } from "@doppio/sdk";

/**
 * The dashboard's client of the control plane: the typed SDK, same-origin, session cookie.
 * Every answer is parsed with its route's schema (packages/contracts/src/routes.ts) before a
 * page sees it. The SDK sends `{}` as JSON on bodyless changes, as the CSRF check wants.
 */

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly details?: unknown,
  ) {
    super(message);
    this.name = "ApiError";
  }
}

interface Issue {
  path?: string;
  message?: string;
}

/** The API's message in plain words; validation failures list what was wrong with each field. */
function describe(code: string, message: string, details: unknown): string {
  if (code === "validation_failed" && details && typeof details === "object" && "issues" in details) {
    const issues = (details as { issues: Issue[] }).issues;
    const parts = issues.map((i) => i.message).filter((m): m is string => Boolean(m));
    if (parts.length > 0) return capitalise(parts.join("; "));
  }
  return capitalise(message);
}

function capitalise(s: string): string {
  return s.charAt(0).toUpperCase() + s.slice(1);
}

/** The typed SDK (packages/sdk) on this page's origin, with the session cookie; no timeout, as before. */
const sdk = new DoppioClient({ baseUrl: "", credentials: "same-origin", timeoutMs: 0 });

/**
 * Calls a route of the contract by name; its answer comes parsed with the route's schema.
 * Failures become an ApiError whose message a page can show as it is.
 */
export async function call<K extends RouteName>(
  name: K,
  input: RouteInput<Routes[K]>,
): Promise<RouteOutput<Routes[K]>> {
  try {
    return await sdk.request(name, input);
  } catch (err) {
    if (err instanceof NetworkError) {
      throw new ApiError(
        0,
        "network",
        "Cannot reach doppiobox. Check your connection and try again.",
        err.cause,
      );
    }
    if (err instanceof UnexpectedAnswerError) {
      throw new ApiError(
        err.status,
        "bad_answer",
        "The server's answer was not understood. Reload the page.",
      );
    }
    if (err instanceof SdkApiError) {
      const code = err.error?.code ?? "http_error";
      const message = err.error?.message ?? `The server answered ${err.status}.`;
      throw new ApiError(err.status, code, describe(code, message, err.error?.details), err.error?.details);
    }
    throw err;
  }
}

export function errorText(err: unknown): string {
  if (err instanceof ApiError) return err.message;
  if (err instanceof Error) return err.message;
  return "Something went wrong.";
}
