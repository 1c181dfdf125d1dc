import { type Route, type RouteInput, type RouteOutput, routeUrl } from "@doppio/contracts";

/**
 * Thin JSON client for the control plane: same-origin, session cookie, one error shape.
 * Paths and answers come from the route contract (packages/contracts/src/routes.ts); every
 * answer is parsed with its schema before a page sees it.
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

export async function call<R extends Route>(route: R, input: RouteInput<R>): Promise<RouteOutput<R>> {
  const given = input as { params?: Record<string, string>; query?: Record<string, unknown>; body?: unknown };
  // The API takes cookie-authenticated changes only as JSON from this origin (CSRF check):
  // bodyless actions (start, stop, logout, delete) send `{}`.
  const payload = route.method === "GET" ? undefined : JSON.stringify(given.body ?? {});
  let res: Response;
  try {
    res = await fetch(routeUrl(route, given), {
      method: route.method,
      credentials: "same-origin",
      headers: payload === undefined ? {} : { "content-type": "application/json" },
      body: payload,
    });
  } catch (cause) {
    throw new ApiError(0, "network", "Cannot reach doppiobox. Check your connection and try again.", cause);
  }
  const text = await res.text();
  let parsed: unknown = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    // A proxy error page, not our API: fall through to a generic message.
  }
  if (!res.ok) {
    const err = (parsed as { error?: { code?: string; message?: string; details?: unknown } } | null)?.error;
    const code = err?.code ?? "http_error";
    const message = err?.message ?? `The server answered ${res.status}.`;
    throw new ApiError(res.status, code, describe(code, message, err?.details), err?.details);
  }
  const answer = route.responses[res.status]?.safeParse(parsed);
  if (!answer?.success) {
    throw new ApiError(res.status, "bad_answer", "The server's answer was not understood. Reload the page.");
  }
  return answer.data as RouteOutput<R>;
}

export function errorText(err: unknown): string {
  if (err instanceof ApiError) return err.message;
  if (err instanceof Error) return err.message;
  return "Something went wrong.";
}
