import {
  ApiToken,
  Box,
  type CreateBoxRequest,
  CreatedToken,
  ErrorBody,
  type ErrorCode,
  Job,
  LogsPage,
  Me,
  Template,
} from "@doppio/contracts";
import { z } from "zod";
import { CliError, type CliErrorKind } from "./errors.ts";

const API_PREFIX = "/api/v1";
const REQUEST_TIMEOUT_MS = 30_000;

export const BoxWithJob = z.object({ box: Box, job: Job });
export type BoxWithJob = z.infer<typeof BoxWithJob>;

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

/** A small typed client of the control plane's /api/v1, on Node's fetch. */
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
    return `${this.baseUrl}${API_PREFIX}${path}`;
  }

  /** Sends one request; returns the raw response after mapping errors to CliErrors. */
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

  async json<T>(schema: z.ZodType<T>, method: string, path: string, body?: unknown): Promise<T> {
    const res = await this.raw(method, path, { body });
    const text = await res.text();
    try {
      return schema.parse(JSON.parse(text));
    } catch (err) {
      throw new CliError(
        "failed",
        `unexpected answer from ${this.baseUrl} (${method} ${path})`,
        "is this a doppiobox control plane, and are the CLI and server versions compatible?",
        { cause: err },
      );
    }
  }

  me = () => this.json(Me, "GET", "/me");
  templates = async () =>
    (await this.json(z.object({ templates: z.array(Template) }), "GET", "/templates")).templates;
  boxes = async () => (await this.json(z.object({ boxes: z.array(Box) }), "GET", "/boxes")).boxes;
  box = (slug: string) => this.json(Box, "GET", `/boxes/${encodeURIComponent(slug)}`);
  jobs = async (slug: string) =>
    (await this.json(z.object({ jobs: z.array(Job) }), "GET", `/boxes/${encodeURIComponent(slug)}/jobs`))
      .jobs;
  createBox = (req: CreateBoxRequest) => this.json(BoxWithJob, "POST", "/boxes", req);
  action = (slug: string, action: "start" | "stop" | "reset") =>
    forBox(slug, this.json(BoxWithJob, "POST", `/boxes/${encodeURIComponent(slug)}/${action}`, {}));
  deleteBox = (slug: string) =>
    forBox(slug, this.json(BoxWithJob, "DELETE", `/boxes/${encodeURIComponent(slug)}`));
  logs = (slug: string, query: LogsRequest) =>
    this.json(LogsPage, "GET", `/boxes/${encodeURIComponent(slug)}/logs${logsQueryString(query)}`);
  tokens = async () => (await this.json(z.object({ tokens: z.array(ApiToken) }), "GET", "/tokens")).tokens;
  revokeToken = async (id: string) => {
    await this.raw("DELETE", `/tokens/${encodeURIComponent(id)}`);
  };

  /**
   * Exchanges email and password for a personal API token. The session the login opens
   * lives only for this exchange and is closed right after; the password is never stored.
   */
  async loginForToken(email: string, password: string, tokenName: string) {
    const login = await this.raw("POST", "/auth/login", { body: { email, password } });
    const me = Me.parse(await login.json());
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
      const res = await this.raw("POST", "/tokens", { body: { name: tokenName }, headers });
      return { me, token: CreatedToken.parse(await res.json()) };
    } finally {
      await this.raw("POST", "/auth/logout", { body: {}, headers }).catch(() => {});
    }
  }
}

/** What `doppio logs` asks for; the server applies the same defaults and limits. */
export interface LogsRequest {
  after?: number;
  tail?: number;
  source?: string;
}

export function logsQueryString(q: LogsRequest): string {
  const params = new URLSearchParams();
  if (q.after !== undefined) params.set("after", String(q.after));
  if (q.tail !== undefined) params.set("tail", String(q.tail));
  if (q.source !== undefined) params.set("source", q.source);
  const s = params.toString();
  return s ? `?${s}` : "";
}

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
