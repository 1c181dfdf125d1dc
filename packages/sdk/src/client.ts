import {
  type BoxEnv,
  type CreateBoxRequest,
  type CreateTokenRequest,
  ErrorBody,
  type LogsQuery,
  type RouteEvents,
  type RouteInput,
  type RouteName,
  type RouteOutput,
  type Routes,
  routes,
  routeUrl,
  type SetBoxIdleRequest,
} from "@doppio/contracts";
import { ApiError, NetworkError, StreamBrokenError, UnexpectedAnswerError } from "./errors.ts";
import { parseSse } from "./sse.ts";

export interface ClientOptions {
  /** The control plane's URL, e.g. `https://doppio.example.com`; `""` for the page's own origin (browser). */
  baseUrl: string;
  /** A personal API token (`dpb_…`), or an agent token (`dpa_…`) for the agent routes. None: the browser's session cookie. */
  token?: string;
  /** Headers sent with every request. */
  headers?: Record<string, string>;
  /** Per request, streams excepted; 0 for none. Default 30 s. */
  timeoutMs?: number;
  /** Browsers: whether to send the session cookie (default `same-origin`). */
  credentials?: RequestInit["credentials"];
  fetch?: typeof fetch;
}

export interface CallOptions {
  signal?: AbortSignal;
  headers?: Record<string, string>;
}

/** One event of a stream, its `data` parsed with the route's schema for that event. */
export type StreamEvent<K extends RouteName> = {
  [E in keyof RouteEvents<Routes[K]>]: { event: E; data: RouteEvents<Routes[K]>[E]; id?: string };
}[keyof RouteEvents<Routes[K]>];

type AnyInput = { params?: Record<string, string>; query?: Record<string, unknown>; body?: unknown };

/**
 * A typed client of the control plane, built from the route contract
 * (packages/contracts/src/routes.ts): `request("getBox", {params: {slug}})` sends what the
 * route takes and returns its answer parsed with the route's schema. Refusals throw
 * `ApiError` (the API's `{error: {code, message, details?}}`), no answer `NetworkError`, an
 * answer that does not fit `UnexpectedAnswerError`.
 *
 * Every change (any method but GET) carries a JSON body, `{}` when the route takes none:
 * the control plane wants that of cookie-authenticated callers (its CSRF check; a browser's
 * `fetch` adds the same-origin `Origin` itself), and it costs bearer callers nothing.
 */
export class DoppioClient {
  readonly baseUrl: string;
  private readonly opts: ClientOptions;

  constructor(opts: ClientOptions) {
    this.baseUrl = opts.baseUrl.replace(/\/+$/, "");
    this.opts = opts;
  }

  /** The same client with another token (e.g. the one a login just made). */
  withToken(token: string): DoppioClient {
    return new DoppioClient({ ...this.opts, token });
  }

  /** Sends one call of a route and returns the raw answer; refusals and network failures throw. */
  async send<K extends RouteName>(
    name: K,
    input: RouteInput<Routes[K]>,
    opts: CallOptions = {},
  ): Promise<Response> {
    const route = routes[name];
    const given = input as AnyInput;
    const stream = route.events !== undefined;
    const headers: Record<string, string> = {
      accept: stream ? "text/event-stream" : "application/json",
      ...this.opts.headers,
      ...opts.headers,
    };
    if (this.opts.token) headers.authorization = `Bearer ${this.opts.token}`;
    const body = route.method === "GET" ? undefined : JSON.stringify(given.body ?? {});
    if (body !== undefined) headers["content-type"] = "application/json";
    const timeoutMs = stream ? 0 : (this.opts.timeoutMs ?? 30_000);
    const signals = [opts.signal, timeoutMs > 0 ? AbortSignal.timeout(timeoutMs) : undefined].filter(
      (s): s is AbortSignal => s !== undefined,
    );
    let res: Response;
    try {
      res = await (this.opts.fetch ?? fetch)(`${this.baseUrl}${routeUrl(route, given)}`, {
        method: route.method,
        headers,
        body,
        credentials: this.opts.credentials ?? "same-origin",
        signal: signals.length > 1 ? AbortSignal.any(signals) : signals[0],
      });
    } catch (err) {
      // The caller's own abort is theirs to see as it is.
      if (opts.signal?.aborted) throw err;
      throw new NetworkError(`cannot reach ${this.baseUrl || "the control plane"}`, { cause: err });
    }
    if (!res.ok) {
      const text = await res.text().catch(() => "");
      let parsed: ErrorBody | null = null;
      try {
        parsed = ErrorBody.parse(JSON.parse(text));
      } catch {
        parsed = null; // not the API's shape: a proxy or load balancer answered
      }
      throw new ApiError(res.status, parsed?.error ?? null);
    }
    return res;
  }

  /** Calls a route and returns its answer, parsed with the schema for the status it came with. */
  async request<K extends RouteName>(
    name: K,
    input: RouteInput<Routes[K]>,
    opts: CallOptions = {},
  ): Promise<RouteOutput<Routes[K]>> {
    const route = routes[name];
    const res = await this.send(name, input, opts);
    const path = routeUrl(route, input as AnyInput);
    const text = await res.text().catch((cause: unknown) => {
      throw new NetworkError(`the answer to ${route.method} ${path} broke off`, { cause });
    });
    const schema = (route.responses as Record<number, { parse(v: unknown): unknown }>)[res.status];
    try {
      if (!schema) throw new Error(`HTTP ${res.status} is not an answer this route gives`);
      return schema.parse(text === "" ? null : JSON.parse(text)) as RouteOutput<Routes[K]>;
    } catch (cause) {
      throw new UnexpectedAnswerError(route.method, path, res.status, { cause });
    }
  }

  /**
   * Opens a server-sent event stream (`streamEvents`, `streamBoxLogs`) and yields its
   * events, each `data` parsed with its schema (an event that does not fit is skipped),
   * until the server ends it or `signal` aborts. `onOpen` runs once the server accepted.
   */
  async *stream<K extends RouteName>(
    name: K,
    input: RouteInput<Routes[K]>,
    opts: CallOptions & { onOpen?: () => void } = {},
  ): AsyncGenerator<StreamEvent<K>> {
    const events = (routes[name].events ?? {}) as Record<
      string,
      { safeParse(v: unknown): { success: boolean; data?: unknown } }
    >;
    const res = await this.send(name, input, opts);
    opts.onOpen?.();
    if (!res.body) return;
    const messages = parseSse(res.body, opts.signal);
    while (true) {
      let next: IteratorResult<{ event: string; data: string; id?: string }>;
      try {
        next = await messages.next();
      } catch (err) {
        // A stream cut off mid-way (a proxy, the network) is no answer, as a refused connection is.
        if (opts.signal?.aborted) return;
        throw new StreamBrokenError(`the stream ${routes[name].path} broke off`, { cause: err });
      }
      if (next.done) return;
      const message = next.value;
      const schema = events[message.event];
      if (!schema) continue;
      let json: unknown;
      try {
        json = JSON.parse(message.data);
      } catch {
        continue;
      }
      const parsed = schema.safeParse(json);
      if (!parsed.success) continue;
      yield {
        event: message.event,
        data: parsed.data,
        ...(message.id === undefined ? {} : { id: message.id }),
      } as StreamEvent<K>;
    }
  }

  me = (opts?: CallOptions) => this.request("getMe", {}, opts);
  templates = async (opts?: CallOptions) => (await this.request("listTemplates", {}, opts)).templates;
  boxes = async (opts?: CallOptions) => (await this.request("listBoxes", {}, opts)).boxes;
  box = (slug: string, opts?: CallOptions) => this.request("getBox", { params: { slug } }, opts);
  createBox = (req: CreateBoxRequest, opts?: CallOptions) => this.request("createBox", { body: req }, opts);
  updateBoxEnv = (slug: string, env: BoxEnv, opts?: CallOptions) =>
    this.request("updateBox", { params: { slug }, body: { env } }, opts);
  startBox = (slug: string, opts?: CallOptions) => this.request("startBox", { params: { slug } }, opts);
  stopBox = (slug: string, opts?: CallOptions) => this.request("stopBox", { params: { slug } }, opts);
  hibernateBox = (slug: string, opts?: CallOptions) =>
    this.request("hibernateBox", { params: { slug } }, opts);
  keepBoxAwake = (slug: string, opts?: CallOptions) =>
    this.request("keepBoxAwake", { params: { slug } }, opts);
  setBoxIdle = (slug: string, body: SetBoxIdleRequest, opts?: CallOptions) =>
    this.request("setBoxIdle", { params: { slug }, body }, opts);
  setIdleDefault = (idleTimeoutMinutes: number | null, opts?: CallOptions) =>
    this.request("setIdleDefault", { body: { idleTimeoutMinutes } }, opts);
  resetBox = (slug: string, opts?: CallOptions) => this.request("resetBox", { params: { slug } }, opts);
  deleteBox = (slug: string, opts?: CallOptions) => this.request("deleteBox", { params: { slug } }, opts);
  jobs = async (slug: string, opts?: CallOptions) =>
    (await this.request("listBoxJobs", { params: { slug } }, opts)).jobs;
  logs = (slug: string, query: Partial<LogsQuery> = {}, opts?: CallOptions) =>
    this.request("getBoxLogs", { params: { slug }, query }, opts);
  tokens = async (opts?: CallOptions) => (await this.request("listTokens", {}, opts)).tokens;
  createToken = (req: CreateTokenRequest, opts?: CallOptions) =>
    this.request("createToken", { body: req }, opts);
  revokeToken = async (id: string, opts?: CallOptions) => {
    await this.request("revokeToken", { params: { id } }, opts);
  };
  servers = async (opts?: CallOptions) => (await this.request("listServers", {}, opts)).servers;
  github = (opts?: CallOptions) => this.request("getGitHub", {}, opts);
  githubRepos = async (opts?: CallOptions) => (await this.request("listGitHubRepos", {}, opts)).repositories;
  connectGitHub = (opts?: CallOptions) => this.request("connectGitHub", { body: {} }, opts);
  unlinkGitHub = async (opts?: CallOptions) => {
    await this.request("unlinkGitHub", {}, opts);
  };
}
