import { createHash, timingSafeEqual } from "node:crypto";
import { ERROR_STATUS, type ErrorBody, type ErrorCode, slugProblem } from "@doppio/contracts";
import Fastify, {
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyReply,
  LogController,
} from "fastify";
import type { Logger } from "pino";
import { z } from "zod";
import type { AgentConfig } from "../config.ts";
import { type EdgePluginOptions, edgePlugin } from "../edge/plugin.ts";
import { goldenStatus } from "../images/golden-status.ts";
import type { ImageStore } from "../images/store.ts";
import { AGENT_VERSION } from "../loops/heartbeat.ts";
import type { Metrics } from "../metrics.ts";
import type { BoxStore } from "../store/boxes.ts";
import type { IpPool } from "../store/ip-pool.ts";
import type { JobStore } from "../store/jobs.ts";
import type { Executor } from "../vmm/executor.ts";

export interface ApiDeps {
  config: AgentConfig;
  executor: Executor;
  /** Template images: golden status is "stale" when the golden predates the current image. */
  images?: ImageStore | null;
  boxes: BoxStore;
  ipPool: IpPool;
  jobs: JobStore;
  metrics: Metrics;
  log: Logger;
  /** Queues a local build_golden job; returns its id. */
  enqueueGoldenBuild(template: string): string;
  /** The edge's routes Caddy calls on loopback (edge/plugin.ts); mounted outside the bearer scope. */
  edge?: EdgePluginOptions | undefined;
  /** When the control plane last accepted a heartbeat (provisioning waits for one after a deploy). */
  lastHeartbeatAt?: () => Date | null;
}

const BuildBody = z.strictObject({ template: z.string().min(1) });

/** The contracts' one error body (packages/contracts/src/errors.ts), with its code's status by default. */
function sendError(reply: FastifyReply, code: ErrorCode, message: string, status = ERROR_STATUS[code]) {
  const body: ErrorBody = { error: { code, message } };
  return reply.code(status).send(body);
}

function digest(s: string): Buffer {
  return createHash("sha256").update(s).digest();
}

/**
 * The agent's own HTTP API (loopback by default). Everything under the protected scope
 * needs `Authorization: Bearer <apiToken>`; /health and the edge routes Caddy calls do not.
 */
export async function buildApi(d: ApiDeps): Promise<FastifyInstance> {
  const app = Fastify({
    loggerInstance: d.log.child({ component: "api" }) as FastifyBaseLogger, // Caddy calls /edge/check on every proxied request: per-request logs would drown the rest.
    logController: new LogController({ disableRequestLogging: true }),
  });
  const expected = digest(d.config.apiToken);

  app.setErrorHandler((err: { statusCode?: number; message: string }, _req, reply) => {
    const status = err.statusCode && err.statusCode < 500 ? err.statusCode : 500;
    if (status !== 500) return sendError(reply, "bad_request", err.message, status);
    d.log.error({ err }, "agent api error");
    return sendError(reply, "internal", "internal error");
  });
  app.setNotFoundHandler((_req, reply) => sendError(reply, "not_found", "not found"));

  app.get("/health", async () => ({
    ok: true,
    version: AGENT_VERSION,
    backend: d.config.backend,
    lastHeartbeatAt: d.lastHeartbeatAt?.()?.toISOString() ?? null,
  }));

  if (d.edge) await app.register(edgePlugin, d.edge);

  await app.register(async (api) => {
    api.addHook("onRequest", async (req, reply) => {
      const h = req.headers.authorization ?? "";
      const token = h.startsWith("Bearer ") ? h.slice(7) : "";
      if (!token || !timingSafeEqual(digest(token), expected)) {
        return sendError(reply, "unauthorized", "missing or wrong bearer token");
      }
    });

    api.post("/golden-snapshot/build", async (req, reply) => {
      const body = BuildBody.safeParse(req.body);
      if (!body.success) return sendError(reply, "validation_failed", "body must be {template}");
      if (!d.config.templates.some((t) => t.name === body.data.template)) {
        return sendError(
          reply,
          "not_found",
          `template "${body.data.template}" is not configured on this host`,
        );
      }
      const job = d.enqueueGoldenBuild(body.data.template);
      return reply.code(202).send({ job });
    });

    api.get("/golden-snapshot/status", async () => {
      const templates: Record<string, unknown> = {};
      for (const t of d.config.templates)
        templates[t.name] = await goldenStatus(d.executor, d.images ?? null, t.name);
      const builds = d.jobs.recent(10, { action: "build_golden" }).map((j) => ({
        id: j.id,
        template: (j.payload as { template?: string }).template ?? null,
        status: j.status,
        ok: j.ok,
        error: j.error,
        local: j.local,
      }));
      return { templates, builds };
    });

    const vmView = async (slug: string, state?: string) => {
      const box = d.boxes.get(slug);
      return {
        slug,
        state: state ?? (await d.executor.inspect(slug)),
        desiredState: box?.desiredState ?? null,
        ip: d.ipPool.get(slug),
        mac: box?.mac ?? null,
        tap: box?.tap ?? null,
        template: box?.spec.template ?? null,
        generation: box?.generation ?? null,
      };
    };

    api.get("/vms", async () => {
      const listed = new Map((await d.executor.list()).map((v) => [v.slug, v.state as string]));
      for (const b of d.boxes.all()) if (!listed.has(b.slug)) listed.set(b.slug, "gone");
      const vms = [];
      for (const [slug, state] of [...listed].sort(([a], [b]) => a.localeCompare(b)))
        vms.push(await vmView(slug, state));
      return { vms };
    });

    api.get("/vms/:slug", async (req, reply) => {
      const { slug } = req.params as { slug: string };
      if (slugProblem(slug)) return sendError(reply, "not_found", `no box "${slug}" on this host`);
      const view = await vmView(slug);
      if (view.state === "gone" && !d.boxes.get(slug))
        return sendError(reply, "not_found", `no box "${slug}" on this host`);
      return view;
    });

    api.get("/metrics", async (_req, reply) => {
      d.metrics.outboxBacklog.set(d.jobs.backlog());
      return reply.type(d.metrics.registry.contentType).send(await d.metrics.registry.metrics());
    });
  });

  return app;
}
