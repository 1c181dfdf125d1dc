import { z } from "zod";

/**
 * What a route of the control plane is (its method, path, inputs, answers, who may call it)
 * and the rules every client shares about it: how its URL is built, which refusals it can
 * give. The routes themselves are listed in routes.ts.
 */

export type HttpMethod = "GET" | "POST" | "PATCH" | "DELETE";

/**
 * Who may call a route: anyone (`none`); anyone, acting on the session cookie if one is
 * sent (`session`: logout); a signed-in user by session cookie or personal API token
 * (`user`), the same but redirected to sign in instead of refused (`user-or-redirect`); the
 * administrator (`admin`); a host's agent by its agent token (`agent`).
 */
export type RouteAuth = "none" | "session" | "user" | "user-or-redirect" | "admin" | "agent";

/** Groups of the public API description, in the order it lists them. */
export const ROUTE_TAGS = {
  auth: "Sign-up, sign-in and the signed-in user",
  tokens: "Personal API tokens",
  boxes: "Boxes, their templates and their jobs",
  logs: "Box guest logs",
  realtime: "Live changes as server-sent events",
  access: "Private box URLs",
  billing: "Wallet, prices, top-ups and invoices",
  servers: "Hosts (administrators only)",
  github: "GitHub: sign-in, installations, repositories, webhooks",
  agent: "The agent protocol (host agents only)",
} as const;
export type RouteTag = keyof typeof ROUTE_TAGS;

export interface Route<
  M extends HttpMethod = HttpMethod,
  P extends z.ZodType | undefined = z.ZodType | undefined,
  Q extends z.ZodType | undefined = z.ZodType | undefined,
  B extends z.ZodType | undefined = z.ZodType | undefined,
  R extends Record<number, z.ZodType> = Record<number, z.ZodType>,
  E extends Record<string, z.ZodType> | undefined = Record<string, z.ZodType> | undefined,
> {
  method: M;
  /** Fastify's spelling: `/api/v1/boxes/:slug`. */
  path: string;
  /** One line for the API description. */
  summary: string;
  tag: RouteTag;
  auth: RouteAuth;
  /**
   * Refusals particular to this route (statuses of `ERROR_STATUS`, packages/contracts/src/errors.ts),
   * besides those every route of its kind can give (`routeErrors` below).
   */
  errors: readonly number[];
  params: P;
  query: Q;
  body: B;
  /** The answer's body per success status; `NoContent` for none. */
  responses: R;
  /** A server-sent event stream instead of a JSON answer: each event's name and `data`. */
  events: E;
}

export function route<
  const M extends HttpMethod,
  P extends z.ZodType | undefined = undefined,
  Q extends z.ZodType | undefined = undefined,
  B extends z.ZodType | undefined = undefined,
  const R extends Record<number, z.ZodType> = Record<never, z.ZodType>,
  E extends Record<string, z.ZodType> | undefined = undefined,
>(def: {
  method: M;
  path: string;
  summary: string;
  tag: RouteTag;
  auth: RouteAuth;
  errors?: readonly number[];
  params?: P;
  query?: Q;
  body?: B;
  responses?: R;
  events?: E;
}): Route<M, P, Q, B, R, E> {
  return {
    method: def.method,
    path: def.path,
    summary: def.summary,
    tag: def.tag,
    auth: def.auth,
    errors: def.errors ?? [],
    params: def.params as P,
    query: def.query as Q,
    body: def.body as B,
    responses: (def.responses ?? {}) as R,
    events: def.events as E,
  };
}

/** No body (204 No Content, 302 redirects). */
export const NoContent = z.null();

type Input<S> = S extends z.ZodType ? z.input<S> : undefined;
type Nothing = Record<never, never>;

/** What a caller gives a route: its path parameters, query and body, each only when it has one. */
export type RouteInput<R extends Route> = (R["params"] extends z.ZodType
  ? { params: Input<R["params"]> }
  : Nothing) &
  (R["query"] extends z.ZodType ? { query?: Input<R["query"]> } : Nothing) &
  (R["body"] extends z.ZodType ? { body: Input<R["body"]> } : Nothing);

/** The parsed answer of a route: the union of its success bodies. */
export type RouteOutput<R extends Route> = {
  [S in keyof R["responses"]]: z.output<R["responses"][S]>;
}[keyof R["responses"]];

/** The data of each event a streaming route sends, by event name. */
export type RouteEvents<R extends Route> = {
  [E in keyof NonNullable<R["events"]>]: z.output<NonNullable<R["events"]>[E]>;
};

/**
 * The path and query of one call: `:name` segments filled in (URL-encoded), query fields
 * in the order given, unset ones left out.
 */
export function routeUrl(
  route: Route,
  input: { params?: Record<string, string | number>; query?: Record<string, unknown> } = {},
): string {
  const path = route.path.replace(/:([A-Za-z]+)/g, (_, name: string) => {
    const value = input.params?.[name];
    if (value === undefined) throw new Error(`${route.path}: no value for :${name}`);
    return encodeURIComponent(String(value));
  });
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(input.query ?? {})) {
    if (value !== undefined && value !== null) query.set(key, String(value));
  }
  const qs = query.toString();
  return qs ? `${path}?${qs}` : path;
}

/** How a caller proves who it is, as the API description names each way. */
export const SECURITY_SCHEMES = {
  session: {
    type: "apiKey",
    in: "cookie",
    name: "doppio_session",
    description:
      "The dashboard's session (HttpOnly, SameSite=Lax). A change (any method but GET) made with it must be JSON (`content-type: application/json`) and carry the control plane's own `Origin` (or `Sec-Fetch-Site: same-origin`); browsers send both with `fetch`. Send `{}` when there is nothing to say.",
  },
  apiToken: {
    type: "http",
    scheme: "bearer",
    bearerFormat: "dpb_…",
    description:
      "A personal API token (`Authorization: Bearer dpb_…`), made in the dashboard or by `doppio login`. Not subject to the origin check.",
  },
  agentToken: {
    type: "http",
    scheme: "bearer",
    bearerFormat: "dpa_…",
    description:
      "A host's agent token (`Authorization: Bearer dpa_…`), shown once when the host is registered.",
  },
} as const;
type Scheme = keyof typeof SECURITY_SCHEMES;

/** The ways in, any one of which is enough; `{}` means none is needed. */
export function routeSecurity(auth: RouteAuth): Partial<Record<Scheme, string[]>>[] {
  switch (auth) {
    case "none":
      return [];
    case "session":
      return [{ session: [] }, {}];
    case "user":
    case "admin":
      return [{ session: [] }, { apiToken: [] }];
    case "user-or-redirect":
      return [{ session: [] }, { apiToken: [] }, {}];
    case "agent":
      return [{ agentToken: [] }];
  }
}

/** What each refusal status means; the body is always the one error shape (errors.ts). */
const ERROR_MEANING: Record<number, string> = {
  400: "The request is malformed or fails validation (`bad_request`, `validation_failed`).",
  401: "No valid credential: not signed in, or the token is unknown, expired or revoked (`unauthorized`).",
  402: "The wallet has no credit left; top up first (`payment_required`).",
  403: "Not allowed (`forbidden`): administrators only, a per-user quota, or a cookie-authenticated change that is not JSON from the control plane's own origin.",
  404: "No such resource, or not yours: the two answer alike (`not_found`).",
  409: "Conflicts with the resource's current state (`conflict`), or needs something this deployment has not configured (`not_configured`).",
  413: "The body is too large (`payload_too_large`).",
  415: "The body is not JSON (`bad_request`).",
  431: "The URL or the headers are too large (`bad_request`); Node refuses them before any route.",
  429: "Too many requests or open streams; wait and retry (`rate_limited`, with `Retry-After` when known).",
  500: "Internal error (`internal`); the reason is logged, never returned.",
  503: "Nothing can serve it right now: no capacity or a dependency unavailable (`no_capacity`, `unavailable`).",
};

/**
 * Every refusal a route can give, by status, with what it means: those its kind implies
 * (inputs, a body, authentication, path parameters, a stream) and its own (`route.errors`).
 */
export function routeErrors(route: Route): Map<number, string> {
  const change = route.method !== "GET";
  const statuses = new Set<number>([500, ...route.errors]);
  if (change || route.params || route.query || route.body) statuses.add(400);
  if (change) statuses.add(413).add(415);
  if (route.auth === "user" || route.auth === "admin" || route.auth === "agent") statuses.add(401);
  if (route.auth === "admin") statuses.add(403);
  if (change && route.auth !== "none" && route.auth !== "agent") statuses.add(403);
  if (route.params) statuses.add(404);
  // Caller-sized parameters can outgrow Node's 16 KB header limit (apps/api/src/http/errors.ts).
  if (route.params || route.query) statuses.add(431);
  if (route.events) statuses.add(429);
  return new Map(
    [...statuses].sort((a, b) => a - b).map((status) => [status, ERROR_MEANING[status] ?? "Refused."]),
  );
}
