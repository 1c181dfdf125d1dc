import { Box, CreateBoxRequest, Job, slugProblem, Template, UpdateBoxRequest } from "@doppio/contracts";
import type { FastifyPluginAsyncZod } from "fastify-type-provider-zod";
import { z } from "zod";
import type { Ctx } from "../context.ts";
import { notFound } from "../errors.ts";
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
    const lookup = async (req: { principal?: import("../services/users.ts").Principal }, slug: string) => {
      if (slugProblem(slug)) throw notFound(`box "${slug}"`);
      return findBox(ctx, req.principal!, slug);
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
        const { box, job } = await createBox(ctx, req.principal!, req.body);
        const v = await view(box.id);
        return reply.code(202).send({ box: v.box, job: toJob(job, box.slug, v.serverName) });
      },
    );

    app.get(
      "/boxes/:slug",
      { onRequest: user, schema: { tags: ["boxes"], params: SlugParams, response: { 200: Box } } },
      async (req) => (await view((await lookup(req, req.params.slug)).id)).box,
    );

    app.patch(
      "/boxes/:slug",
      {
        onRequest: user,
        schema: { tags: ["boxes"], params: SlugParams, body: UpdateBoxRequest, response: { 200: Box } },
      },
      async (req) => {
        const box = await lookup(req, req.params.slug);
        await updateBoxEnv(ctx, req.principal!, box.slug, req.body.env);
        return (await view(box.id)).box;
      },
    );

    for (const action of ["start", "stop", "reset"] as const) {
      app.post(
        `/boxes/:slug/${action}`,
        {
          onRequest: user,
          schema: { tags: ["boxes"], params: SlugParams, response: { 202: BoxWithJob, 200: BoxWithJob } },
        },
        async (req, reply) => {
          const box = await lookup(req, req.params.slug);
          const result = await performAction(ctx, req.principal!, box.slug, action);
          const v = await view(box.id);
          return reply
            .code(result.deduplicated ? 200 : 202)
            .send({ box: v.box, job: toJob(result.job, box.slug, v.serverName) });
        },
      );
    }

    app.delete(
      "/boxes/:slug",
      {
        onRequest: user,
        schema: { tags: ["boxes"], params: SlugParams, response: { 202: BoxWithJob, 200: BoxWithJob } },
      },
      async (req, reply) => {
        const box = await lookup(req, req.params.slug);
        const result = await performAction(ctx, req.principal!, box.slug, "delete");
        const v = await view(box.id);
        return reply
          .code(result.deduplicated ? 200 : 202)
          .send({ box: v.box, job: toJob(result.job, box.slug, v.serverName) });
      },
    );

    app.get(
      "/boxes/:slug/jobs",
      {
        onRequest: user,
        schema: { tags: ["boxes"], params: SlugParams, response: { 200: z.object({ jobs: z.array(Job) }) } },
      },
      async (req) => {
        const box = await lookup(req, req.params.slug);
        const v = await view(box.id);
        return { jobs: (await listBoxJobs(ctx, box.id)).map((j) => toJob(j, box.slug, v.serverName)) };
      },
    );
  };
}
