import { parseBoxHost } from "@doppio/contracts";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { type DecideDeps, decide } from "./decide.ts";
import { WAKE_RETRY_SECONDS } from "./pages.ts";

export const CHECK_PATH = "/edge/check";
export const ASK_PATH = "/tls/ask";
const UPSTREAM_HEADER = "x-doppio-upstream";

export interface EdgePluginOptions extends DecideDeps {
  /** Told of every request the edge passes to a box (idle tracking). */
  activity?: { touch(slug: string): void };
  /** Asked to resume a hibernated box an allowed request reached (rate limited by the waker). */
  wake?: (slug: string) => void;
}

const HOSTNAME =
  /^(?=.{1,253}$)([a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$/i;

/**
 * The agent side of the edge. Caddy calls these on loopback:
 *  - GET /edge/check: forward-auth for every box request; 2xx + X-Doppio-Upstream means
 *    "proxy there", anything else is sent to the client as is (404/503 pages, 302, 401).
 *  - GET /tls/ask?domain=: on-demand TLS permission, only for hostnames of boxes on this host.
 * Both refuse callers that are not on loopback: the answers reveal guest addresses.
 */
export async function edgePlugin(app: FastifyInstance, opts: EdgePluginOptions): Promise<void> {
  app.get(CHECK_PATH, async (req, reply) => {
    if (!fromLoopback(req)) return reply.code(404).send();
    const h = req.headers;
    const decision = decide(
      {
        host: header(h["x-forwarded-host"]) ?? header(h.host) ?? "",
        uri: header(h["x-forwarded-uri"]) ?? "/",
        method: header(h["x-forwarded-method"]) ?? "GET",
        https: header(h["x-forwarded-proto"]) === "https",
        cookie: header(h.cookie),
        accept: header(h.accept),
      },
      opts,
    );
    reply.header("cache-control", "no-store");
    if (decision.kind === "pass") {
      opts.activity?.touch(decision.box.slug);
      return reply.code(200).header(UPSTREAM_HEADER, decision.upstream).send();
    }
    if (decision.kind === "wake") {
      opts.wake?.(decision.slug);
      reply.code(503).header("retry-after", String(WAKE_RETRY_SECONDS));
      if (decision.html) return reply.type("text/html; charset=utf-8").send(decision.page.html);
      return reply.type("application/json").send({
        error: {
          code: "waking",
          message: `box ${decision.slug} is waking up; retry after ${WAKE_RETRY_SECONDS} s`,
        },
      });
    }
    req.log.debug({ host: h["x-forwarded-host"], reason: decision.reason }, "edge refused");
    if (decision.kind === "redirect") {
      if (decision.setCookie) reply.header("set-cookie", decision.setCookie);
      return reply.code(302).header("location", decision.location).send();
    }
    return reply.code(decision.page.status).type("text/html; charset=utf-8").send(decision.page.html);
  });

  app.get(ASK_PATH, async (req, reply) => {
    if (!fromLoopback(req)) return reply.code(404).send();
    const domain = (req.query as Record<string, unknown>).domain;
    if (typeof domain !== "string" || !HOSTNAME.test(domain)) return reply.code(400).send();
    const box = parseBoxHost(domain, opts.domain);
    // Stopped boxes count: their URL must still serve the "stopped" page over TLS.
    if (!box || !opts.routes.get(box.slug)) return reply.code(404).send();
    return reply.code(200).send();
  });
}

function header(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}

function fromLoopback(req: FastifyRequest): boolean {
  const a = req.socket.remoteAddress ?? "";
  return a.startsWith("127.") || a === "::1" || a.startsWith("::ffff:127.");
}
