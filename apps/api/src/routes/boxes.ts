import { Box, CreateBoxRequest, Job, Template, UpdateBoxRequest } from "@doppio/contracts";
import type { FastifyPluginAsyncZod } from "fastify-type-provider-zod";
import { z } from "zod";
import type { Ctx } from "../context.ts";
import { AppError, notFound } from "../errors.ts";
import { requireUser } from "../http/auth.ts";
import { loadBoxView, toBox } from "../services/box-view.ts";
import { createBox, findBox, listBoxes, performAction, updateBoxEnv } from "../services/boxes.ts";
import { listBoxJobs, toJob } from "../services/jobs.ts";
import { listTemplates } from "../services/templates.ts";

// Any string reaches the handler; one that cannot be a slug is simply a box that does not exist.
const SlugParams = z.object({ slug: z.string().max(1024) });
const BoxWithJob = z.object({ box: Box, job: Job });

export function boxRoutes(ctx: Ctx): FastifyPluginAsyncZod {
  const user = requireUser(ctx);

  return async (app) => {
    const view = async (boxId: string) => {
      const row = await loadBoxView(ctx, boxId);
      if (!row) throw notFound("box");
      return { box: toBox(row.box, row.server), serverName: row.server?.name ?? "" };
    };

    app.get(
      "/templates",
      {
        onRequest: user,
        schema: { tags: ["boxes"], response: { 200: z.object({ templates: z.array(Template) }) } },
      },
      async () => ({ templates: await listTemplates(ctx) }),
    );

    app.get(
      "/boxes",
      { onRequest: user, schema: { tags: ["boxes"], response: { 200: z.object({ boxes: z.array(Box) }) } } },
      async (req) => ({ boxes: (await listBoxes(ctx, req.principal!)).map((r) => toBox(r.box, r.server)) }),
    );

    app.post(
      "/boxes",
      {
        onRequest: user,
        schema: { tags: ["boxes"], body: CreateBoxRequest, response: { 202: BoxWithJob } },
      },
      async (req, reply) => {
        // Every create that gets this far counts, refused or not: each costs a transaction.
        const waitMs = ctx.boxCreates.take(req.principal!.userId, ctx.clock.now().getTime());
        if (waitMs > 0) {
          const seconds = Math.ceil(waitMs / 1000);
          reply.header("retry-after", String(seconds));
          throw new AppError(
            "rate_limited",
            `too many boxes created (at most ${ctx.boxCreates.limit} a minute); try again in ${seconds} s`,
            { retryAfterSeconds: seconds },
          );
        }
        const { box, job } = await createBox(ctx, req.principal!, req.body);
        const v = await view(box.id);
        return reply.code(202).send({ box: v.box, job: toJob(job, box.slug, v.serverName) });
      },
    );

    app.get(
      "/boxes/:slug",
      { onRequest: user, schema: { tags: ["boxes"], params: SlugParams, response: { 200: Box } } },
      async (req) => (await view((await findBox(ctx, req.principal!, req.params.slug)).id)).box,
    );

    app.patch(
      "/boxes/:slug",
      {
        onRequest: user,
        schema: { tags: ["boxes"], params: SlugParams, body: UpdateBoxRequest, response: { 200: Box } },
      },
      async (req) => {
        const box = await findBox(ctx, req.principal!, req.params.slug);
        await updateBoxEnv(ctx, req.principal!, box.slug, req.body.env);
        return (await view(box.id)).box;
      },
    );

    // start/stop/reset are POSTs on the box; delete is DELETE of it. Same answer for each:
    // 202 with the queued job, or 200 with the identical job already in flight.
    const actions = [
      ["POST", "/boxes/:slug/start", "start"],
      ["POST", "/boxes/:slug/stop", "stop"],
      ["POST", "/boxes/:slug/reset", "reset"],
      ["DELETE", "/boxes/:slug", "delete"],
    ] as const;
    for (const [method, url, action] of actions) {
      app.route({
        method,
        url,
        onRequest: user,
        schema: { tags: ["boxes"], params: SlugParams, response: { 202: BoxWithJob, 200: BoxWithJob } },
        handler: async (req, reply) => {
          const box = await findBox(ctx, req.principal!, req.params.slug);
          const result = await performAction(ctx, req.principal!, box.slug, action);
          const v = await view(box.id);
          return reply
            .code(result.deduplicated ? 200 : 202)
            .send({ box: v.box, job: toJob(result.job, box.slug, v.serverName) });
        },
      });
    }

    app.get(
      "/boxes/:slug/jobs",
      {
        onRequest: user,
        schema: { tags: ["boxes"], params: SlugParams, response: { 200: z.object({ jobs: z.array(Job) }) } },
      },
      async (req) => {
        const box = await findBox(ctx, req.principal!, req.params.slug);
        const v = await view(box.id);
        return { jobs: (await listBoxJobs(ctx, box.id)).map((j) => toJob(j, box.slug, v.serverName)) };
      },
    );
  };
}
