import {
  type BoxWithJob,
  type CreateBoxRequest,
  ErrorBody,
  type ErrorCode,
  type LogsQuery,
  type Route,
  type RouteInput,
  type RouteOutput,
  routes,
  routeUrl,
} from "@doppio/contracts";
import { CliError, type CliErrorKind } from "./errors.ts";

const REQUEST_TIMEOUT_MS = 30_000;

export type { BoxWithJob };

/** Errors the user caused map to usage (2); everything else the server refused is a failure (1). */
const KIND_BY_CODE: Partial<Record<ErrorCode, CliErrorKind>> = {
  bad_request: "usage",
  validation_failed: "usage",
};

const HINT_BY_CODE: Partial<Record<ErrorCode, string>> = {
  unauthorized: "sign in with: doppio login",
  forbidden: "this account may not do that",
  not_found: "list your boxes with: doppio ls",
  conflict: "check the box with: doppio status NAME",
  rate_limited: "wait a minute and try again",
  validation_failed: "check the arguments against --help",
  no_capacity: "try again later or pick a smaller --size",
};

export class ApiError extends CliError {
  constructor(
    readonly status: number,
    readonly code: ErrorCode | null,
    message: string,
    hint?: string,
    kind: CliErrorKind = "failed",
  ) {
    super(kind, message, hint);
  }
}

/**
 * A small typed client of the control plane's /api/v1, on Node's fetch: paths and answers
 * come from the route contract (packages/contracts/src/routes.ts).
 */
export class ApiClient {
  constructor(
    readonly baseUrl: string,
    private readonly token?: string,
    private readonly fetchImpl: typeof fetch = fetch,
  ) {}

  withToken(token: string): ApiClient {
    return new ApiClient(this.baseUrl, token, this.fetchImpl);
  }

  url(path: string): string {
    return `${this.baseUrl}${path}`;
  }

  /** Sends one request (`path` from the route contract); returns the raw response after mapping errors to CliErrors. */
  async raw(
    method: string,
    path: string,
    opts: { body?: unknown; headers?: Record<string, string>; signal?: AbortSignal; stream?: boolean } = {},
  ): Promise<Response> {
    const headers: Record<string, string> = { accept: "application/json", ...opts.headers };
    if (this.token) headers.authorization = `Bearer ${this.token}`;
    if (opts.body !== undefined) headers["content-type"] = "application/json";
    const signal = opts.stream
      ? opts.signal
      : opts.signal
        ? AbortSignal.any([opts.signal, AbortSignal.timeout(REQUEST_TIMEOUT_MS)])
        : AbortSignal.timeout(REQUEST_TIMEOUT_MS);
    let res: Response;
    try {
      res = await this.fetchImpl(this.url(path), {
        method,
        headers,
        body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
        signal,
      });
    } catch (err) {
      if (opts.signal?.aborted) throw err;
      throw unreachable(this.baseUrl, err);
    }
    if (!res.ok) throw await toApiError(this.baseUrl, res);
    return res;
  }

  /**
   * Calls one route of the contract and parses its answer with the schema for the status it
   * came with. Every change carries a JSON body (`{}` when the route takes none).
   */
  async call<R extends Route>(route: R, input: RouteInput<R>): Promise<RouteOutput<R>> {
    const given = input as {
      params?: Record<string, string>;
      query?: Record<string, unknown>;
      body?: unknown;
    };
    const path = routeUrl(route, given);
    const body = route.method === "GET" ? undefined : (given.body ?? {});
    const res = await this.raw(route.method, path, { body });
    const text = await res.text();
    try {
      const schema = route.responses[res.status];
      if (!schema) throw new Error(`HTTP ${res.status} is not an answer of ${route.method} ${route.path}`);
      return schema.parse(text === "" ? null : JSON.parse(text)) as RouteOutput<R>;
    } catch (err) {
      throw new CliError(
        "failed",
        `unexpected answer from ${this.baseUrl} (${route.method} ${path.replace(/^\/api\/v1/, "")})`,
        "is this a doppiobox control plane, and are the CLI and server versions compatible?",
        { cause: err },
      );
    }
  }

  me = () => this.call(routes.getMe, {});
  templates = async () => (await this.call(routes.listTemplates, {})).templates;
  boxes = async () => (await this.call(routes.listBoxes, {})).boxes;
  box = (slug: string) => this.call(routes.getBox, { params: { slug } });
  jobs = async (slug: string) => (await this.call(routes.listBoxJobs, { params: { slug } })).jobs;
  createBox = (req: CreateBoxRequest) => this.call(routes.createBox, { body: req });
  action = (slug: string, action: "start" | "stop" | "reset") =>
    forBox(slug, this.call(ACTION_ROUTES[action], { params: { slug } }));
  deleteBox = (slug: string) => forBox(slug, this.call(routes.deleteBox, { params: { slug } }));
  logs = (slug: string, query: LogsRequest) => this.call(routes.getBoxLogs, { params: { slug }, query });
  tokens = async () => (await this.call(routes.listTokens, {})).tokens;
  revokeToken = async (id: string) => {
    await this.call(routes.revokeToken, { params: { id } });
  };

  /**
   * Exchanges email and password for a personal API token. The session the login opens
   * lives only for this exchange and is closed right after; the password is never stored.
   */
  async loginForToken(email: string, password: string, tokenName: string) {
    const login = await this.raw("POST", routes.login.path, { body: { email, password } });
    const me = routes.login.responses[200].parse(await login.json());
    const cookie = login.headers
      .getSetCookie()
      .map((c) => c.split(";")[0]!)
      .find((c) => c.startsWith("doppio_session="));
    if (!cookie) throw new CliError("failed", "the server did not open a session", "try --token instead");
    // The API refuses cookie-authenticated changes a browser page on another origin could
    // have sent; this is no browser, and it says where it stands the way browsers do
    // (pages can never set Sec-Fetch-* themselves). Bodies are JSON, `{}` when empty.
    const headers = { cookie, "sec-fetch-site": "same-origin" };
    try {
      const res = await this.raw("POST", routes.createToken.path, { body: { name: tokenName }, headers });
      return { me, token: routes.createToken.responses[201].parse(await res.json()) };
    } finally {
      await this.raw("POST", routes.logout.path, { body: {}, headers }).catch(() => {});
    }
  }
}

const ACTION_ROUTES = { start: routes.startBox, stop: routes.stopBox, reset: routes.resetBox } as const;

/** What `doppio logs` asks for; the server applies the same defaults and limits. */
export type LogsRequest = Partial<LogsQuery>;

/** Puts the box's name into hints like "doppio status NAME". */
async function forBox<T>(slug: string, request: Promise<T>): Promise<T> {
  try {
    return await request;
  } catch (err) {
    if (err instanceof ApiError && err.hint?.includes("NAME")) {
      throw new ApiError(err.status, err.code, err.message, err.hint.replace("NAME", slug), err.kind);
    }
    throw err;
  }
}

export function unreachable(baseUrl: string, cause: unknown): CliError {
  const reason = describeNetworkError(cause);
  return new CliError(
    "unreachable",
    `cannot reach the control plane at ${baseUrl}${reason ? ` (${reason})` : ""}`,
    "check the URL (doppio context ls) and your network",
    { cause },
  );
}

function describeNetworkError(err: unknown): string {
  for (let e: unknown = err; e && typeof e === "object"; e = (e as { cause?: unknown }).cause) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string") return code;
    if ((e as { name?: unknown }).name === "TimeoutError") return "timed out";
  }
  return "";
}

async function toApiError(baseUrl: string, res: Response): Promise<CliError> {
  const text = await res.text().catch(() => "");
  let body: ErrorBody | null = null;
  try {
    body = ErrorBody.parse(JSON.parse(text));
  } catch {
    body = null;
  }
  if (!body) {
    // A proxy or load balancer answering instead of the control plane.
    if (res.status === 502 || res.status === 503 || res.status === 504) {
      return new CliError(
        "unreachable",
        `the control plane at ${baseUrl} is not answering (HTTP ${res.status})`,
        "try again in a moment",
      );
    }
    return new ApiError(
      res.status,
      null,
      `unexpected HTTP ${res.status} from ${baseUrl}`,
      "retry with --debug",
    );
  }
  const { code, message, details } = body.error;
  const field = (details as { field?: unknown } | undefined)?.field;
  const hint = field === "template" ? "list templates with: doppio templates" : HINT_BY_CODE[code];
  return new ApiError(res.status, code, message, hint, KIND_BY_CODE[code] ?? "failed");
}
