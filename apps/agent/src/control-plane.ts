import { Agent as HttpAgent, request as httpRequest } from "node:http";
import { Agent as HttpsAgent, request as httpsRequest } from "node:https";
import {
  AGENT_MAX_IN_FLIGHT,
  type GitCredential,
  GitCredential as GitCredentialSchema,
  type Heartbeat,
  type HeartbeatResponse,
  HeartbeatResponse as HeartbeatResponseSchema,
  type JobEvent,
  type LogBatch,
  type LogBatchAck,
  LogBatchAck as LogBatchAckSchema,
} from "@doppio/contracts";
import { z } from "zod";
import { AgentError } from "./errors.ts";

/**
 * A claimed job as the agent reads it: deliberately looser than the contract's ClaimedJob,
 * so one job with an action or payload this agent does not understand fails on its own
 * (with a clear result) instead of making the whole claim unreadable.
 */
const RawClaimedJob = z.object({
  id: z.string().min(1),
  action: z.string(),
  box: z.string().nullable().default(null),
  payload: z.unknown(),
  attempt: z.number().int().default(1),
});
type RawClaimedJob = z.infer<typeof RawClaimedJob>;

const ClaimBody = z.object({ jobs: z.array(z.unknown()) });
const EventsBody = z.object({ applied: z.number().int(), lastSeq: z.number().int() });

/** A box's Git credential, or why there is none (the control plane's 404 message). */
export type GitCredentialAnswer = { credential: GitCredential } | { unavailable: string };

/** The agent's view of the control plane: outbound calls only, nothing inbound. */
export interface ControlPlane {
  claim(
    max: number,
    waitMs: number,
    signal?: AbortSignal,
  ): Promise<{ jobs: RawClaimedJob[]; rejected: unknown[] }>;
  sendEvents(jobId: string, events: JobEvent[]): Promise<{ applied: number; lastSeq: number }>;
  heartbeat(hb: Heartbeat): Promise<HeartbeatResponse>;
  /** A short-lived Git credential for one of this server's boxes (metadata service). */
  gitCredential?(slug: string): Promise<GitCredentialAnswer>;
  /** Ships complete serial-log lines of one of this server's boxes; 404 if it is not one. */
  shipLogs?(slug: string, batch: LogBatch): Promise<LogBatchAck>;
  /** Asks for a hibernated box of this server to be resumed (an allowed request reached it). */
  wakeBox?(slug: string): Promise<void>;
  close?(): void;
}

/**
 * Of a host's AGENT_MAX_IN_FLIGHT requests, those its boxes' guests or visitors start (a
 * box's `git credential fill`, a request waking a hibernated box) may take this many: a
 * tenant asking in a loop then waits for these, never for the connections the agent's own
 * job events, heartbeats and logs use.
 */
const BOX_ASKED_CONNECTIONS = 2;

export class HttpControlPlane implements ControlPlane {
  readonly #base: string;
  /** Connections for the agent's own requests (events, heartbeats, logs). */
  readonly #agent: HttpAgent;
  /** Connections for requests boxes or their visitors start (BOX_ASKED_CONNECTIONS). */
  readonly #boxAgent: HttpAgent;
  /** The claim long-poll's own connection, so no other request ever takes its place. */
  readonly #claimAgent: HttpAgent;

  constructor(
    baseUrl: string,
    private readonly token: string,
    private readonly timeoutMs = 15_000,
  ) {
    this.#base = baseUrl.replace(/\/+$/, "");
    // A replica takes at most AGENT_MAX_IN_FLIGHT of a host's requests at once beside its claim
    // long-poll: more wait here, in the connection pool's queue, instead of being refused.
    const pool = (maxSockets: number) =>
      baseUrl.startsWith("https:")
        ? new HttpsAgent({ keepAlive: true, maxSockets })
        : new HttpAgent({ keepAlive: true, maxSockets });
    this.#agent = pool(AGENT_MAX_IN_FLIGHT - BOX_ASKED_CONNECTIONS);
    this.#boxAgent = pool(BOX_ASKED_CONNECTIONS);
    this.#claimAgent = pool(1);
  }

  async claim(max: number, waitMs: number, signal?: AbortSignal) {
    const body = ClaimBody.parse(
      await this.#post(
        "/agent/v1/jobs/claim",
        { max, waitMs },
        waitMs + this.timeoutMs,
        signal,
        this.#claimAgent,
      ),
    );
    const jobs: RawClaimedJob[] = [];
    const rejected: unknown[] = [];
    for (const j of body.jobs) {
      const parsed = RawClaimedJob.safeParse(j);
      if (parsed.success) jobs.push(parsed.data);
      else rejected.push(j);
    }
    return { jobs, rejected };
  }

  async sendEvents(jobId: string, events: JobEvent[]) {
    return EventsBody.parse(
      await this.#post(`/agent/v1/jobs/${encodeURIComponent(jobId)}/events`, { events }, this.timeoutMs),
    );
  }

  async heartbeat(hb: Heartbeat) {
    return HeartbeatResponseSchema.parse(await this.#post("/agent/v1/heartbeat", hb, this.timeoutMs));
  }

  async gitCredential(slug: string): Promise<GitCredentialAnswer> {
    const path = `/agent/v1/boxes/${encodeURIComponent(slug)}/git-credential`;
    try {
      const body = await this.#post(path, {}, this.timeoutMs, undefined, this.#boxAgent);
      return { credential: GitCredentialSchema.parse(body) };
    } catch (err) {
      if (rejectedStatus(err) !== 404) throw err;
      return {
        unavailable: errorMessage((err as AgentError).details?.body) ?? "no Git credential for this box",
      };
    }
  }

  async shipLogs(slug: string, batch: LogBatch): Promise<LogBatchAck> {
    const path = `/agent/v1/boxes/${encodeURIComponent(slug)}/logs`;
    return LogBatchAckSchema.parse(await this.#post(path, batch, this.timeoutMs));
  }

  async wakeBox(slug: string): Promise<void> {
    const path = `/agent/v1/boxes/${encodeURIComponent(slug)}/wake`;
    await this.#post(path, {}, this.timeoutMs, undefined, this.#boxAgent);
  }

  /** Drops pooled connections so nothing outlives the agent (and the peer can close at once). */
  close(): void {
    for (const pool of [this.#agent, this.#boxAgent, this.#claimAgent]) pool.destroy();
  }

  async #post(
    path: string,
    body: unknown,
    timeoutMs: number,
    signal?: AbortSignal,
    agent = this.#agent,
  ): Promise<unknown> {
    let res: { status: number; text: string; retryAfter: string | undefined };
    try {
      res = await this.#request(path, JSON.stringify(body), timeoutMs, agent, signal);
    } catch (err) {
      throw new AgentError("control_plane_unreachable", `control plane unreachable (${path})`, {
        cause: err,
        details: { path },
      });
    }
    if (res.status < 200 || res.status >= 300) {
      throw new AgentError("control_plane_rejected", `control plane answered ${res.status} to ${path}`, {
        details: {
          status: res.status,
          path,
          body: res.text.slice(0, 500),
          ...(res.retryAfter ? { retryAfterMs: retryAfterHeaderMs(res.retryAfter) } : {}),
        },
      });
    }
    try {
      return JSON.parse(res.text) as unknown;
    } catch (err) {
      throw new AgentError("control_plane_rejected", `control plane sent a body that is not JSON (${path})`, {
        cause: err,
        details: { status: res.status, path },
      });
    }
  }

  #request(
    path: string,
    body: string,
    timeoutMs: number,
    agent: HttpAgent,
    signal?: AbortSignal,
  ): Promise<{ status: number; text: string; retryAfter: string | undefined }> {
    const url = new URL(`${this.#base}${path}`);
    const send = url.protocol === "https:" ? httpsRequest : httpRequest;
    return new Promise((resolve, reject) => {
      const req = send(
        url,
        {
          method: "POST",
          agent,
          headers: {
            authorization: `Bearer ${this.token}`,
            "content-type": "application/json",
            "content-length": Buffer.byteLength(body),
          },
          timeout: timeoutMs,
          ...(signal ? { signal } : {}),
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (c: Buffer) => chunks.push(c));
          res.on("end", () =>
            resolve({
              status: res.statusCode ?? 0,
              text: Buffer.concat(chunks).toString("utf8"),
              retryAfter: res.headers["retry-after"],
            }),
          );
          res.on("error", reject);
        },
      );
      req.on("timeout", () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
      req.on("error", reject);
      req.end(body);
    });
  }
}

/** HTTP status of a rejected control-plane call, or null for transport failures. */
export function rejectedStatus(err: unknown): number | null {
  if (err instanceof AgentError && err.code === "control_plane_rejected") {
    const s = err.details?.status;
    return typeof s === "number" ? s : null;
  }
  return null;
}

/**
 * How long the control plane asked this host to wait before trying again (the `Retry-After`
 * of its refusal, in ms), or 0. The agent's loops wait at least this long, on top of their
 * own backoff.
 */
export function retryAfterMs(err: unknown): number {
  if (!(err instanceof AgentError) || err.code !== "control_plane_rejected") return 0;
  const ms = err.details?.retryAfterMs;
  return typeof ms === "number" ? ms : 0;
}

/** A `Retry-After` in seconds (the only form the control plane sends), capped at a minute; 0 if unreadable. */
function retryAfterHeaderMs(value: string): number {
  const seconds = Number(value);
  return Number.isFinite(seconds) && seconds > 0 ? Math.min(seconds, 60) * 1000 : 0;
}

/** `error.message` of an API error body (text), if it has one. */
function errorMessage(body: unknown): string | null {
  if (typeof body !== "string") return null;
  try {
    const m = (JSON.parse(body) as { error?: { message?: unknown } }).error?.message;
    return typeof m === "string" ? m : null;
  } catch {
    return null;
  }
}
