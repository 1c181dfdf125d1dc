import type { FastifyPluginAsyncZod } from "fastify-type-provider-zod";
import type { Ctx } from "../context.ts";
import { AppError, notFound } from "../errors.ts";
import { requireUser } from "../http/auth.ts";
import { type BoxView, loadBoxView, toBox } from "../services/box-view.ts";
import {
  createBox,
  findBox,
  findBoxView,
  listBoxes,
  performAction,
  updateBoxEnv,
} from "../services/boxes.ts";
import { listBoxJobs, toJob } from "../services/jobs.ts";
import { listTemplates } from "../services/templates.ts";
import { endpoint } from "./contract.ts";

export function boxRoutes(ctx: Ctx): FastifyPluginAsyncZod {
  const user = requireUser(ctx);

  return async (app) => {
    const shown = (row: BoxView) => ({
      box: toBox(row.box, row.server, row.ownerIdle),
      serverName: row.server?.name ?? "",
    });
    const view = async (boxId: string) => {
      const row = await loadBoxView(ctx, boxId);
      if (!row) throw notFound("box");
      return shown(row);
    };

    app.route({
      ...endpoint("listTemplates"),
      onRequest: user,
      handler: async () => ({ templates: await listTemplates(ctx) }),
    });

    app.route({
      ...endpoint("listBoxes"),
      onRequest: user,
      handler: async (req) => ({
        boxes: (await listBoxes(ctx, req.principal!)).map((r) => toBox(r.box, r.server, r.ownerIdle)),
      }),
    });

    app.route({
      ...endpoint("createBox"),
      onRequest: user,
      handler: async (req, reply) => {
        // Every create that gets this far counts, refused or not: each costs a transaction.
        const waitMs = await ctx.boxCreates.take(req.principal!.userId, ctx.clock.now().getTime());
        if (waitMs > 0) {
          const seconds = Math.ceil(waitMs / 1000);
          reply.header("retry-after", String(seconds));
          throw new AppError(
            "rate_limited",
            `too many boxes created (at most ${ctx.boxCreates.limit} a minute); try again in ${seconds} s`,
            { retryAfterSeconds: seconds },
          );
        }
        const { box, job, view: row } = await createBox(ctx, req.principal!, req.body);
        const v = shown(row);
        return reply.code(202).send({ box: v.box, job: toJob(job, box.slug, v.serverName) });
      },
    });

    app.route({
      ...endpoint("getBox"),
      onRequest: user,
      handler: async (req) => shown(await findBoxView(ctx, req.principal!, req.params.slug)).box,
    });

    app.route({
      ...endpoint("updateBox"),
      onRequest: user,
      handler: async (req) => {
        const box = await findBox(ctx, req.principal!, req.params.slug);
        await updateBoxEnv(ctx, req.principal!, box.slug, req.body.env);
        return (await view(box.id)).box;
      },
    });

    // Same answer for each: 202 with the queued job, or 200 with the identical job already in flight.
    const actions = [
      ["startBox", "start"],
      ["stopBox", "stop"],
      ["hibernateBox", "hibernate"],
      ["resetBox", "reset"],
      ["deleteBox", "delete"],
    ] as const;
    for (const [contract, action] of actions) {
      app.route({
        ...endpoint(contract),
        onRequest: user,
        handler: async (req, reply) => {
          const result = await performAction(ctx, req.principal!, req.params.slug, action);
          const { box } = result;
          const v = result.view ? shown(result.view) : await view(box.id);
          return reply
            .code(result.deduplicated ? 200 : 202)
            .send({ box: v.box, job: toJob(result.job, box.slug, v.serverName) });
        },
      });
    }

    app.route({
      ...endpoint("listBoxJobs"),
      onRequest: user,
      handler: async (req) => {
        const row = await findBoxView(ctx, req.principal!, req.params.slug);
        const { slug, id } = row.box;
        return { jobs: (await listBoxJobs(ctx, id)).map((j) => toJob(j, slug, shown(row).serverName)) };
      },
    });
  };
}
