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
  ServerActionRequest,
  ServerList,
  SetWarmPoolRequest,
  SignupRequest,
  TemplateJobRequest,
  TemplateList,
  TokenList,
} from "./api.ts";
import { TopUp, WalletEvent } from "./billing.ts";
import { billingRoutes } from "./billing-routes.ts";
import { Box, CreateBoxRequest, UpdateBoxRequest } from "./box.ts";
import {
  GitHubCallbackQuery,
  GitHubConnect,
  GitHubConnectRequest,
  GitHubRepoList,
  GitHubSetupQuery,
  GitHubSignInQuery,
  GitHubStatus,
  GitHubWebhookAck,
} from "./github.ts";
import { IdleDefault, SetBoxIdleRequest, SetIdleDefaultRequest, WakeRequest, WakeResponse } from "./idle.ts";
import { Job } from "./job.ts";
import { LogBatch, LogBatchAck, LogLine, LogsPage, LogsQuery } from "./logs.ts";
import { playRoutes } from "./play-routes.ts";
import { type HttpMethod, NoContent, route } from "./route.ts";
import { verificationRoutes } from "./verification.ts";

/**
 * Every HTTP route of the control plane, defined once: method, path, inputs and the answer
 * per status. The routes (apps/api/src/routes) register these; the clients (CLI, dashboard)
 * build their URLs from them and parse each answer with the same schema.
 */

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

const boxAction = <const M extends HttpMethod>(method: M, path: string, summary: string) =>
  route({
    method,
    path,
    summary,
    tag: "boxes",
    auth: "user",
    // 409: the box's state does not allow it, or another action is in flight.
    errors: [409],
    params: SlugParams,
    responses: { 200: BoxWithJob, 202: BoxWithJob },
  });

export const routes = {
  signup: route({
    method: "POST",
    path: "/api/v1/auth/signup",
    summary: "Create an account and sign in (sets the session cookie)",
    tag: "auth",
    auth: "none",
    errors: [409, 429],
    body: SignupRequest,
    responses: { 201: Me },
  }),
  login: route({
    method: "POST",
    path: "/api/v1/auth/login",
    summary: "Sign in with email and password (sets the session cookie)",
    tag: "auth",
    auth: "none",
    errors: [401, 429],
    body: LoginRequest,
    responses: { 200: Me },
  }),
  logout: route({
    method: "POST",
    path: "/api/v1/auth/logout",
    summary: "End the session of the cookie sent, and the box access it opened",
    tag: "auth",
    auth: "session",
    responses: { 204: NoContent },
  }),
  getMe: route({
    method: "GET",
    path: "/api/v1/me",
    summary: "The signed-in user and their team",
    tag: "auth",
    auth: "user",
    responses: { 200: Me },
  }),

  listTokens: route({
    method: "GET",
    path: "/api/v1/tokens",
    summary: "List your personal API tokens (never their secrets)",
    tag: "tokens",
    auth: "user",
    responses: { 200: TokenList },
  }),
  createToken: route({
    method: "POST",
    path: "/api/v1/tokens",
    summary: "Create a personal API token; its secret is shown this once",
    tag: "tokens",
    auth: "user",
    body: CreateTokenRequest,
    responses: { 201: CreatedToken },
  }),
  revokeToken: route({
    method: "DELETE",
    path: "/api/v1/tokens/:id",
    summary: "Revoke a personal API token and the box access it opened",
    tag: "tokens",
    auth: "user",
    params: IdParams,
    responses: { 204: NoContent },
  }),

  listTemplates: route({
    method: "GET",
    path: "/api/v1/templates",
    summary: "List the templates boxes are made from, and where each is ready",
    tag: "boxes",
    auth: "user",
    responses: { 200: TemplateList },
  }),
  listBoxes: route({
    method: "GET",
    path: "/api/v1/boxes",
    summary: "List your team's boxes",
    tag: "boxes",
    auth: "user",
    responses: { 200: BoxList },
  }),
  createBox: route({
    method: "POST",
    path: "/api/v1/boxes",
    summary: "Create a box; answers at once with the queued create job",
    tag: "boxes",
    auth: "user",
    // 403: box quota reached; 409: name taken; 429: create rate; 503: no server can take it.
    errors: [402, 409, 429, 503],
    body: CreateBoxRequest,
    responses: { 202: BoxWithJob },
  }),
  getBox: route({
    method: "GET",
    path: "/api/v1/boxes/:slug",
    summary: "One box: state, allowed actions, URLs, environment",
    tag: "boxes",
    auth: "user",
    params: SlugParams,
    responses: { 200: Box },
  }),
  updateBox: route({
    method: "PATCH",
    path: "/api/v1/boxes/:slug",
    summary: "Replace a box's environment variables (applied at its next start)",
    tag: "boxes",
    auth: "user",
    params: SlugParams,
    body: UpdateBoxRequest,
    responses: { 200: Box },
  }),
  // 402: the owner's wallet is empty.
  startBox: {
    ...boxAction(
      "POST",
      "/api/v1/boxes/:slug/start",
      "Start a stopped box, or resume a hibernated one where it was",
    ),
    errors: [402, 409],
  },
  hibernateBox: boxAction(
    "POST",
    "/api/v1/boxes/:slug/hibernate",
    "Hibernate a running box: its memory is kept on its host and a start resumes it",
  ),
  stopBox: boxAction("POST", "/api/v1/boxes/:slug/stop", "Stop a running box (its disk is kept)"),
  resetBox: boxAction(
    "POST",
    "/api/v1/boxes/:slug/reset",
    "Reset a box to its template (its data volume is kept)",
  ),
  deleteBox: boxAction("DELETE", "/api/v1/boxes/:slug", "Delete a box and everything on it"),
  setBoxIdle: route({
    method: "PATCH",
    path: "/api/v1/boxes/:slug/idle",
    summary: "Set a box's idle timeout (null: its owner's default; 0: never) and who may wake it",
    tag: "boxes",
    auth: "user",
    params: SlugParams,
    body: SetBoxIdleRequest,
    responses: { 200: Box },
  }),
  keepBoxAwake: route({
    method: "POST",
    path: "/api/v1/boxes/:slug/keep-awake",
    summary: "Count the box as used now: its idle timer starts again",
    tag: "boxes",
    auth: "user",
    params: SlugParams,
    responses: { 200: Box },
  }),
  setIdleDefault: route({
    method: "PATCH",
    path: "/api/v1/me/idle",
    summary: "Set the signed-in user's idle timeout for boxes without their own (null or 0: never)",
    tag: "auth",
    auth: "user",
    body: SetIdleDefaultRequest,
    responses: { 200: IdleDefault },
  }),
  listBoxJobs: route({
    method: "GET",
    path: "/api/v1/boxes/:slug/jobs",
    summary: "A box's jobs, newest first, with their steps",
    tag: "boxes",
    auth: "user",
    params: SlugParams,
    responses: { 200: JobList },
  }),
  getBoxLogs: route({
    method: "GET",
    path: "/api/v1/boxes/:slug/logs",
    summary: "A page of a box's guest log (the newest lines, or those after a seq)",
    tag: "logs",
    auth: "user",
    params: SlugParams,
    query: LogsQuery,
    responses: { 200: LogsPage },
  }),
  streamBoxLogs: route({
    method: "GET",
    path: "/api/v1/boxes/:slug/logs/stream",
    summary: "Follow a box's guest log: `lines` events, resumable by Last-Event-ID",
    tag: "logs",
    auth: "user",
    params: SlugParams,
    query: LogsQuery,
    events: { lines: LogLinesEvent },
  }),
  streamEvents: route({
    method: "GET",
    path: "/api/v1/events",
    summary:
      "Follow your team's box and job changes, your wallet's warnings and your top-ups: `box`, `job`, `wallet` and `topup` events",
    tag: "realtime",
    auth: "user",
    events: { box: Box, job: Job, wallet: WalletEvent, topup: TopUp },
  }),
  openBoxAccess: route({
    method: "GET",
    path: "/api/v1/access/open",
    summary: "Open a private box URL: its owner is redirected there with a hand-off token, others to sign in",
    tag: "access",
    auth: "user-or-redirect",
    errors: [404],
    query: AccessOpenQuery,
    responses: { 302: NoContent },
  }),

  listServers: route({
    method: "GET",
    path: "/api/v1/servers",
    summary: "List hosts with their capacity, use, heartbeat and golden snapshots",
    tag: "servers",
    auth: "admin",
    responses: { 200: ServerList },
  }),
  registerServer: route({
    method: "POST",
    path: "/api/v1/servers",
    summary: "Register a host; its agent token is shown this once",
    tag: "servers",
    auth: "admin",
    errors: [409],
    body: RegisterServerRequest,
    responses: { 201: RegisteredServer },
  }),
  getServer: route({
    method: "GET",
    path: "/api/v1/servers/:name",
    summary: "One host",
    tag: "servers",
    auth: "admin",
    params: ServerNameParams,
    responses: { 200: Server },
  }),
  rotateServerToken: route({
    method: "POST",
    path: "/api/v1/servers/:name/token",
    summary: "Replace a host's agent token; the old one stops working",
    tag: "servers",
    auth: "admin",
    params: ServerNameParams,
    responses: { 200: RotatedAgentToken },
  }),
  serverAction: route({
    method: "POST",
    path: "/api/v1/servers/:name/actions",
    summary:
      "Drain a host (no new boxes; its boxes run on), disable it (no jobs either), or make it active again",
    tag: "servers",
    auth: "admin",
    errors: [409],
    params: ServerNameParams,
    body: ServerActionRequest,
    responses: { 200: Server },
  }),
  setWarmPool: route({
    method: "PATCH",
    path: "/api/v1/servers/:name/warm-pool",
    summary: "Set how many parked clones per template a host keeps ready for creates",
    tag: "servers",
    auth: "admin",
    params: ServerNameParams,
    body: SetWarmPoolRequest,
    responses: { 200: Server },
  }),
  buildGolden: route({
    method: "POST",
    path: "/api/v1/servers/:name/golden",
    summary: "Queue a golden snapshot build of a template on a host",
    tag: "servers",
    auth: "admin",
    params: ServerNameParams,
    body: TemplateJobRequest,
    responses: { 202: Job },
  }),
  buildImage: route({
    method: "POST",
    path: "/api/v1/servers/:name/images",
    summary: "Queue an image build of a template on a host (then its golden snapshot)",
    tag: "servers",
    auth: "admin",
    params: ServerNameParams,
    body: TemplateJobRequest,
    responses: { 202: Job },
  }),

  ...billingRoutes,
  ...verificationRoutes,
  getGitHub: route({
    method: "GET",
    path: "/api/v1/github",
    summary: "Your GitHub connection: linked account, installations, repositories",
    tag: "github",
    auth: "user",
    responses: { 200: GitHubStatus },
  }),
  listGitHubRepos: route({
    method: "GET",
    path: "/api/v1/github/repos",
    summary: "Repositories your connected installations can reach (what a box can be created from)",
    tag: "github",
    auth: "user",
    responses: { 200: GitHubRepoList },
  }),
  connectGitHub: route({
    method: "POST",
    path: "/api/v1/github/connect",
    summary: "A link to install the GitHub App on your account or an organisation (signed, expires)",
    tag: "github",
    auth: "user",
    // 404: no GitHub App configured; 409: GitHub is not linked yet; 503: GitHub unreachable.
    errors: [404, 409, 503],
    body: GitHubConnectRequest,
    responses: { 200: GitHubConnect },
  }),
  unlinkGitHub: route({
    method: "DELETE",
    path: "/api/v1/github/account",
    summary: "Unlink your GitHub account (your doppio account stays); boxes get no new tokens",
    tag: "github",
    auth: "user",
    errors: [409],
    responses: { 204: NoContent },
  }),
  githubSetup: route({
    method: "GET",
    path: "/api/v1/github/setup",
    summary:
      "The GitHub App's setup URL: records the installation you just made (checked with your GitHub token)",
    tag: "github",
    auth: "user-or-redirect",
    errors: [403, 404, 409, 503],
    query: GitHubSetupQuery,
    responses: { 302: NoContent },
  }),
  githubSignIn: route({
    method: "GET",
    path: "/api/v1/auth/github",
    summary: "Start signing in with GitHub (or, signed in, linking it): redirects to GitHub",
    tag: "github",
    auth: "none",
    query: GitHubSignInQuery,
    responses: { 302: NoContent },
  }),
  githubCallback: route({
    method: "GET",
    path: "/api/v1/auth/github/callback",
    summary: "GitHub's OAuth callback: signs in or links, then redirects to the dashboard",
    tag: "github",
    auth: "none",
    query: GitHubCallbackQuery,
    responses: { 302: NoContent },
  }),
  githubWebhook: route({
    method: "POST",
    path: "/api/v1/github/webhooks",
    summary: "GitHub App webhooks (signed with X-Hub-Signature-256; de-duplicated by X-GitHub-Delivery)",
    tag: "github",
    auth: "none",
    // 401: bad signature; 404: no GitHub App configured.
    errors: [401, 404],
    responses: { 200: GitHubWebhookAck },
  }),
  ...playRoutes,

  // The agent protocol: outbound-only from the host, bearer = the server's agent token.
  claimJobs: route({
    method: "POST",
    path: "/agent/v1/jobs/claim",
    summary: "Long-poll for this host's next jobs",
    tag: "agent",
    auth: "agent",
    body: ClaimRequest,
    responses: { 200: ClaimResponse },
  }),
  reportJobEvents: route({
    method: "POST",
    path: "/agent/v1/jobs/:id/events",
    summary: "Report a job's events in sequence (started, steps, log, result)",
    tag: "agent",
    auth: "agent",
    params: IdParams,
    body: JobEventsRequest,
    responses: { 200: JobEventsResponse },
  }),
  heartbeat: route({
    method: "POST",
    path: "/agent/v1/heartbeat",
    summary: "Report the host's inventory, capacity and golden status; learn the expected boxes",
    tag: "agent",
    auth: "agent",
    body: Heartbeat,
    responses: { 200: HeartbeatResponse },
  }),
  issueGitCredential: route({
    method: "POST",
    path: "/agent/v1/boxes/:slug/git-credential",
    summary: "A short-lived Git credential for one of this host's boxes",
    tag: "agent",
    auth: "agent",
    errors: [503],
    params: z.object({ slug: z.string().min(1).max(200) }),
    body: GitCredentialRequest,
    responses: { 200: GitCredential },
  }),
  wakeBox: route({
    method: "POST",
    path: "/agent/v1/boxes/:slug/wake",
    summary: "Resume a hibernated box on this host that an allowed request reached",
    tag: "agent",
    auth: "agent",
    errors: [409],
    params: SlugParams,
    body: WakeRequest,
    responses: { 202: WakeResponse },
  }),
  shipBoxLogs: route({
    method: "POST",
    path: "/agent/v1/boxes/:slug/logs",
    summary: "Ship complete lines of a box's serial log",
    tag: "agent",
    auth: "agent",
    params: SlugParams,
    body: LogBatch,
    responses: { 200: LogBatchAck },
  }),
} as const;

export type Routes = typeof routes;
export type RouteName = keyof Routes;
