import type { LogLine, RouteEvents, routes } from "@doppio/contracts";
import type { FastifyPluginAsyncZod } from "fastify-type-provider-zod";
import type { Ctx } from "../context.ts";
import { requireAgent, requireUser } from "../http/auth.ts";
import { openSse } from "../http/sse.ts";
import { findBox } from "../services/boxes.ts";
import { appendLogs, LOG_KEEP_LINES, readLogs } from "../services/logs.ts";
import { endpoint } from "./contract.ts";

/** Lines a follower gets before the live ones when it (re)connects. */
const BACKLOG_MAX = LOG_KEEP_LINES;
/** Agents cap their batches well below this; the control plane's default body limit is smaller. */
const BATCH_BODY_LIMIT = 2 * 1024 * 1024;

/** A box's guest log for its team: one page as JSON, or followed as server-sent events. */
export function logRoutes(ctx: Ctx): FastifyPluginAsyncZod {
  const user = requireUser(ctx);
  return async (app) => {
    app.route({
      ...endpoint("getBoxLogs"),
      onRequest: user,
      handler: async (req) =>
        readLogs(ctx, (await findBox(ctx, req.principal!, req.params.slug)).id, req.query),
    });

    // `lines` events ({lines}) with the last line's seq as the event id, so an EventSource
    // that reconnects (Last-Event-ID) resumes exactly where it stopped.
    app.route({
      ...endpoint("streamBoxLogs"),
      onRequest: user,
      handler: async (req, reply) => {
        const box = await findBox(ctx, req.principal!, req.params.slug);
        const lastEventId = Number(req.headers["last-event-id"]);
        const q =
          Number.isSafeInteger(lastEventId) && lastEventId >= 0
            ? { ...req.query, after: lastEventId }
            : req.query;
        let sent = q.after ?? 0;
        let live = false;
        const early: LogLine[] = [];
        const send = (lines: LogLine[]) => {
          const fresh = lines.filter((l) => l.seq > sent && (!q.source || l.source === q.source));
          if (fresh.length === 0) return;
          sent = fresh.at(-1)!.seq;
          const event: RouteEvents<typeof routes.streamBoxLogs>["lines"] = { lines: fresh };
          stream.send("lines", event, sent);
        };
        // Subscribe before reading the backlog: lines committed in between are not lost.
        const release = ctx.streamSlots.acquire(req.principal!.userId);
        let unsubscribe = () => {};
        const stream = openSse(ctx, reply, release, () => unsubscribe());
        unsubscribe = ctx.bus.subscribeLogs(box.id, (lines) => (live ? send(lines) : early.push(...lines)));
        try {
          const page = await readLogs(ctx, box.id, q, BACKLOG_MAX);
          send(page.lines);
          sent = Math.max(sent, page.next);
          live = true;
          send(early);
        } catch (err) {
          req.log.error({ err, slug: box.slug }, "log backlog failed");
          stream.end(); // the EventSource reconnects with its Last-Event-ID
        }
      },
    });
  };
}

/** Agents ship their boxes' serial-log lines here (bearer = the server's agent token). */
export function agentLogRoutes(ctx: Ctx): FastifyPluginAsyncZod {
  const agent = requireAgent(ctx);
  return async (app) => {
    app.route({
      ...endpoint("shipBoxLogs"),
      onRequest: agent,
      bodyLimit: BATCH_BODY_LIMIT,
      handler: async (req) => appendLogs(ctx, req.agentServer!, req.params.slug, req.body),
    });
  };
}
