import Fastify, {
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
  LogController,
} from "fastify";
import type { Logger } from "pino";
import { encodeIdentity, IDENTITY_POLL_MS, type WarmPool } from "../pool/warm.ts";
import type { BoxStore } from "../store/boxes.ts";
import type { GitCredentialCache } from "./credentials.ts";
import { shellAssignments } from "./shell.ts";
import { tokenSha256 } from "./tokens.ts";

export interface MetadataServiceDeps {
  boxes: Pick<BoxStore, "byMetadataToken">;
  credentials: Pick<GitCredentialCache, "get" | "forget">;
  /**
   * Tap mode: the caller's address must be the token's box (a token copied out of one box
   * does not work from another). User mode: every guest arrives from QEMU on loopback.
   */
  checkSourceAddress: boolean;
  /** Records a guest's heartbeat (`POST /v1/activity`) as use of its box (idle hibernation). */
  activity?: { touch(slug: string): void };
  /** Warm pool: parked clones wait here for the identity of the box that claims them. */
  pool?: Pick<WarmPool, "byToken" | "waitForIdentity"> | null;
  /** How long one parked wait lasts before a 204 (default IDENTITY_POLL_MS). */
  identityPollMs?: number;
  log: Logger;
}

function sendError(reply: FastifyReply, status: number, code: string, message: string) {
  return reply.code(status).header("cache-control", "no-store").send({ error: { code, message } });
}

/** IPv4 form of a socket address (`::ffff:10.0.0.2` → `10.0.0.2`). */
function ipv4(address: string | undefined): string {
  return (address ?? "").replace(/^::ffff:/, "");
}

/**
 * The metadata service guests call: `GET /v1/git-credential` with `Authorization: Bearer
 * <metadata_token>` answers `{username, token, expiresAt}` for the token's box; `DELETE` drops
 * the box's cached credential.
 */
export async function buildMetadataService(d: MetadataServiceDeps): Promise<FastifyInstance> {
  const log = d.log.child({ component: "metadata" });
  const app = Fastify({
    loggerInstance: log as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: true }),
    // Parked guests hold long-polls; a guest that died never closes its end, so closing the
    // service must not wait for its connections.
    forceCloseConnections: true,
  });
  app.setErrorHandler((err, _req, reply) => {
    log.error({ err }, "metadata service error");
    return sendError(reply, 500, "internal", "internal error");
  });
  app.setNotFoundHandler((_req, reply) => sendError(reply, 404, "not_found", "not found"));

  /** The box whose metadata token the request carries (from its own address in tap mode), or null. */
  const caller = (req: FastifyRequest) => {
    const m = /^Bearer\s+(\S+)$/i.exec(req.headers.authorization ?? "");
    const box = m ? d.boxes.byMetadataToken(tokenSha256(m[1]!)) : null;
    if (!box || (d.checkSourceAddress && ipv4(req.socket.remoteAddress) !== box.ip)) return null;
    return { box, tokenHash: tokenSha256(m![1]!) };
  };

  // The guest's heartbeat: someone uses its terminal or its CPU, though no request reaches
  // its URLs. A box can only vouch for itself (its own token), which keeps only itself awake.
  app.post("/v1/activity", async (req, reply) => {
    const c = caller(req);
    if (!c) return sendError(reply, 401, "unauthorized", "a valid box metadata token is required");
    d.activity?.touch(c.box.slug);
    return reply.code(204).header("cache-control", "no-store").send();
  });

  // A parked clone of the warm pool (pool/warm.ts) waits for the box that claims it. Only
  // a parked bearer (never a box's) works here, from its clone's own address in tap mode, and
  // it only ever answers with the identity the agent handed to that one clone.
  app.get<{ Querystring: { format?: string } }>("/v1/parked/identity", async (req, reply) => {
    const m = /^Bearer\s+(\S+)$/i.exec(req.headers.authorization ?? "");
    const parked = m && d.pool ? d.pool.byToken(tokenSha256(m[1]!)) : null;
    if (!parked || (d.checkSourceAddress && ipv4(req.socket.remoteAddress) !== parked.ip)) {
      return sendError(reply, 401, "unauthorized", "a valid parked-clone token is required");
    }
    const gone = new AbortController();
    reply.raw.once("close", () => gone.abort());
    const meta = await d.pool!.waitForIdentity(
      parked.slug,
      d.identityPollMs ?? IDENTITY_POLL_MS,
      gone.signal,
    );
    reply.header("cache-control", "no-store");
    if (!meta) return reply.code(204).send();
    log.info({ parked: parked.slug, box: meta.slug }, "identity handed to a claimed pool clone");
    // `?format=shell`: the same metadata as shell assignments (shell.ts), which the
    // minimal image's parked-wait asks for so the claimed guest parses no JSON.
    if (req.query.format === "shell") {
      return reply.code(200).type("text/plain; charset=utf-8").send(shellAssignments(meta));
    }
    return reply.code(200).type("application/json").send(encodeIdentity(meta));
  });

  app.get("/v1/git-credential", async (req, reply) => {
    const c = caller(req);
    if (!c) {
      return sendError(reply, 401, "unauthorized", "a valid box metadata token is required");
    }
    const { box } = c;
    let answer: Awaited<ReturnType<typeof d.credentials.get>>;
    try {
      answer = await d.credentials.get(c.tokenHash, box.slug);
    } catch (err) {
      log.warn({ err, slug: box.slug }, "git credential request to the control plane failed");
      return sendError(
        reply,
        503,
        "unavailable",
        "the control plane could not be asked for a Git credential",
      );
    }
    if ("retryAfterMs" in answer) {
      const seconds = Math.ceil(answer.retryAfterMs / 1000);
      // Once per run of refusals: a box asking in a loop must not flood the agent's log either.
      if (answer.first)
        log.warn({ slug: box.slug }, "box asks for Git credentials too often; refusing for now");
      reply.header("retry-after", String(seconds));
      return sendError(
        reply,
        429,
        "rate_limited",
        `this box asked for Git credentials too often; try again in ${seconds} s`,
      );
    }
    if ("unavailable" in answer) return sendError(reply, 404, "not_found", answer.unavailable);
    log.debug({ slug: box.slug, expiresAt: answer.credential.expiresAt }, "git credential handed to box");
    reply.header("cache-control", "no-store");
    return answer.credential;
  });
  // The helper's `erase`: git was refused with the credential it got. Only the caller's own
  // boot's entry goes (the key is its token's digest).
  app.delete("/v1/git-credential", async (req, reply) => {
    const c = caller(req);
    if (!c) return sendError(reply, 401, "unauthorized", "a valid box metadata token is required");
    const dropped = d.credentials.forget(c.tokenHash);
    log.debug({ slug: c.box.slug, dropped }, "git credential erased by box");
    return reply.code(204).header("cache-control", "no-store").send();
  });
  return app;
}
