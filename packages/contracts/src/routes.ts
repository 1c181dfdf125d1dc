import { z } from "zod";
import {
  ClaimRequest,
  ClaimResponse,
  GitCredential,
  GitCredentialRequest,
  Heartbeat,
  HeartbeatResponse,
  JobEventsRequest,
  JobEventsResponse,
} from "./agent-protocol.ts";
import {
  BoxList,
  BoxWithJob,
  CreatedToken,
  CreateTokenRequest,
  JobList,
  LoginRequest,
  Me,
  RegisteredServer,
  RegisterServerRequest,
  RotatedAgentToken,
  Server,
  ServerList,
  SignupRequest,
  TemplateJobRequest,
  TemplateList,
  TokenList,
} from "./api.ts";
import { Box, CreateBoxRequest, UpdateBoxRequest } from "./box.ts";
import { Job } from "./job.ts";
import { LogBatch, LogBatchAck, LogLine, LogsPage, LogsQuery } from "./logs.ts";

/**
 * Every HTTP route of the control plane, defined once: method, path, inputs and the answer
 * per status. The routes (apps/api/src/routes) register these; the clients (CLI, dashboard)
 * build their URLs from them and parse each answer with the same schema.
 */

export type HttpMethod = "GET" | "POST" | "PATCH" | "DELETE";

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
  params: P;
  query: Q;
  body: B;
  /** The answer's body per success status; `NoContent` for none. */
  responses: R;
  /** A server-sent event stream instead of a JSON answer: each event's name and `data`. */
  events: E;
}

function route<
  const M extends HttpMethod,
  P extends z.ZodType | undefined = undefined,
  Q extends z.ZodType | undefined = undefined,
  B extends z.ZodType | undefined = undefined,
  const R extends Record<number, z.ZodType> = Record<never, z.ZodType>,
  E extends Record<string, z.ZodType> | undefined = undefined,
>(def: {
  method: M;
  path: string;
  params?: P;
  query?: Q;
  body?: B;
  responses?: R;
  events?: E;
}): Route<M, P, Q, B, R, E> {
  return {
    method: def.method,
    path: def.path,
    params: def.params as P,
    query: def.query as Q,
    body: def.body as B,
    responses: (def.responses ?? {}) as R,
    events: def.events as E,
  };
}

/** No body (204 No Content, 302 redirects). */
export const NoContent = z.null();

// Any string reaches the handler; one that cannot be a slug is simply a box that does not exist.
export const SlugParams = z.object({ slug: z.string().max(1024) });
export const ServerNameParams = z.object({ name: z.string().max(64) });
export const IdParams = z.object({ id: z.string().uuid() });
export const AccessOpenQuery = z.object({
  host: z.string().min(1).max(300),
  next: z.string().max(4096).default("/"),
});

/** The `lines` event of a box's log stream; its SSE id is the last line's seq. */
export const LogLinesEvent = z.object({ lines: z.array(LogLine) });

const boxAction = <const M extends HttpMethod>(method: M, path: string) =>
  route({ method, path, params: SlugParams, responses: { 200: BoxWithJob, 202: BoxWithJob } });

export const routes = {
  signup: route({ method: "POST", path: "/api/v1/auth/signup", body: SignupRequest, responses: { 201: Me } }),
  login: route({ method: "POST", path: "/api/v1/auth/login", body: LoginRequest, responses: { 200: Me } }),
  logout: route({ method: "POST", path: "/api/v1/auth/logout", responses: { 204: NoContent } }),
  getMe: route({ method: "GET", path: "/api/v1/me", responses: { 200: Me } }),

  listTokens: route({ method: "GET", path: "/api/v1/tokens", responses: { 200: TokenList } }),
  createToken: route({
    method: "POST",
    path: "/api/v1/tokens",
    body: CreateTokenRequest,
    responses: { 201: CreatedToken },
  }),
  revokeToken: route({
    method: "DELETE",
    path: "/api/v1/tokens/:id",
    params: IdParams,
    responses: { 204: NoContent },
  }),

  listTemplates: route({ method: "GET", path: "/api/v1/templates", responses: { 200: TemplateList } }),
  listBoxes: route({ method: "GET", path: "/api/v1/boxes", responses: { 200: BoxList } }),
  createBox: route({
    method: "POST",
    path: "/api/v1/boxes",
    body: CreateBoxRequest,
    responses: { 202: BoxWithJob },
  }),
  getBox: route({ method: "GET", path: "/api/v1/boxes/:slug", params: SlugParams, responses: { 200: Box } }),
  updateBox: route({
    method: "PATCH",
    path: "/api/v1/boxes/:slug",
    params: SlugParams,
    body: UpdateBoxRequest,
    responses: { 200: Box },
  }),
  // start/stop/reset are POSTs on the box; delete is DELETE of it. 202 with the queued job,
  // or 200 with the identical job already in flight.
  startBox: boxAction("POST", "/api/v1/boxes/:slug/start"),
  stopBox: boxAction("POST", "/api/v1/boxes/:slug/stop"),
  resetBox: boxAction("POST", "/api/v1/boxes/:slug/reset"),
  deleteBox: boxAction("DELETE", "/api/v1/boxes/:slug"),
  listBoxJobs: route({
    method: "GET",
    path: "/api/v1/boxes/:slug/jobs",
    params: SlugParams,
    responses: { 200: JobList },
  }),
  getBoxLogs: route({
    method: "GET",
    path: "/api/v1/boxes/:slug/logs",
    params: SlugParams,
    query: LogsQuery,
    responses: { 200: LogsPage },
  }),
  streamBoxLogs: route({
    method: "GET",
    path: "/api/v1/boxes/:slug/logs/stream",
    params: SlugParams,
    query: LogsQuery,
    events: { lines: LogLinesEvent },
  }),
  /** The team's box and job changes as they happen. */
  streamEvents: route({ method: "GET", path: "/api/v1/events", events: { box: Box, job: Job } }),
  /** Private box URLs: a signed-in owner is redirected to the box with a hand-off token. */
  openBoxAccess: route({
    method: "GET",
    path: "/api/v1/access/open",
    query: AccessOpenQuery,
    responses: { 302: NoContent },
  }),

  listServers: route({ method: "GET", path: "/api/v1/servers", responses: { 200: ServerList } }),
  registerServer: route({
    method: "POST",
    path: "/api/v1/servers",
    body: RegisterServerRequest,
    responses: { 201: RegisteredServer },
  }),
  getServer: route({
    method: "GET",
    path: "/api/v1/servers/:name",
    params: ServerNameParams,
    responses: { 200: Server },
  }),
  rotateServerToken: route({
    method: "POST",
    path: "/api/v1/servers/:name/token",
    params: ServerNameParams,
    responses: { 200: RotatedAgentToken },
  }),
  buildGolden: route({
    method: "POST",
    path: "/api/v1/servers/:name/golden",
    params: ServerNameParams,
    body: TemplateJobRequest,
    responses: { 202: Job },
  }),
  buildImage: route({
    method: "POST",
    path: "/api/v1/servers/:name/images",
    params: ServerNameParams,
    body: TemplateJobRequest,
    responses: { 202: Job },
  }),

  // The agent protocol: outbound-only from the host, bearer = the server's agent token.
  claimJobs: route({
    method: "POST",
    path: "/agent/v1/jobs/claim",
    body: ClaimRequest,
    responses: { 200: ClaimResponse },
  }),
  reportJobEvents: route({
    method: "POST",
    path: "/agent/v1/jobs/:id/events",
    params: IdParams,
    body: JobEventsRequest,
    responses: { 200: JobEventsResponse },
  }),
  heartbeat: route({
    method: "POST",
    path: "/agent/v1/heartbeat",
    body: Heartbeat,
    responses: { 200: HeartbeatResponse },
  }),
  issueGitCredential: route({
    method: "POST",
    path: "/agent/v1/boxes/:slug/git-credential",
    params: z.object({ slug: z.string().min(1).max(200) }),
    body: GitCredentialRequest,
    responses: { 200: GitCredential },
  }),
  shipBoxLogs: route({
    method: "POST",
    path: "/agent/v1/boxes/:slug/logs",
    params: SlugParams,
    body: LogBatch,
    responses: { 200: LogBatchAck },
  }),
} as const;

export type Routes = typeof routes;
export type RouteName = keyof Routes;

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
