import type { RouteEvents, routes } from "@doppio/contracts";
import type { FastifyPluginAsyncZod } from "fastify-type-provider-zod";
import { cancelPlay, getPlay, getServerSsh, listPlays, setServerSsh, startPlay } from "../ansible/plays.ts";
import type { PlayRunner } from "../ansible/runner.ts";
import type { Ctx } from "../context.ts";
import { requireAdmin } from "../http/auth.ts";
import { openSse } from "../http/sse.ts";
import { endpoint } from "./contract.ts";

type PlayEvents = RouteEvents<typeof routes.streamPlay>;

/** Ansible plays on hosts: SSH target, start, follow, cancel (administrators only). */
export function playRoutes(ctx: Ctx, runner: PlayRunner): FastifyPluginAsyncZod {
  const admin = requireAdmin(ctx);
  return async (app) => {
    app.route({
      ...endpoint("getControlPlaneSshKey"),
      onRequest: admin,
      handler: async () => ({ publicKey: runner.sshKey.publicKey, fingerprint: runner.sshKey.fingerprint }),
    });
    app.route({
      ...endpoint("getServerSsh"),
      onRequest: admin,
      handler: async (req) => getServerSsh(ctx, req.params.name),
    });
    app.route({
      ...endpoint("setServerSsh"),
      onRequest: admin,
      handler: async (req) => setServerSsh(ctx, req.principal!, req.params.name, req.body),
    });
    app.route({
      ...endpoint("startPlay"),
      onRequest: admin,
      handler: async (req, reply) =>
        reply.code(202).send(await startPlay(ctx, runner, req.principal!, req.params.name, req.body)),
    });
    app.route({
      ...endpoint("listPlays"),
      onRequest: admin,
      handler: async (req) => ({ plays: await listPlays(ctx, req.params.name) }),
    });
    app.route({
      ...endpoint("getPlay"),
      onRequest: admin,
      handler: async (req) => getPlay(ctx, req.params.id),
    });
    app.route({
      ...endpoint("cancelPlay"),
      onRequest: admin,
      handler: async (req) => cancelPlay(ctx, runner, req.principal!, req.params.id),
    });
    app.route({
      ...endpoint("streamPlay"),
      onRequest: admin,
      handler: async (req, reply) => {
        const snapshot = await getPlay(ctx, req.params.id); // 404 before the stream opens
        const release = ctx.streamSlots.acquire(req.principal!.userId);
        let unsubscribe = () => {};
        const stream = openSse(ctx, reply, release, () => unsubscribe());
        const ended = (status: string) => status !== "pending" && status !== "running";
        // Subscribed before the second read, so no change falls between snapshot and live.
        unsubscribe = ctx.bus.subscribePlay(req.params.id, (event) => {
          if (event.type === "task") stream.send("task", event.task satisfies PlayEvents["task"]);
          else {
            stream.send("play", event.play satisfies PlayEvents["play"]);
            if (ended(event.play.status)) stream.end();
          }
        });
        const { tasks, ...play } = ended(snapshot.status) ? snapshot : await getPlay(ctx, req.params.id);
        for (const task of tasks) stream.send("task", task);
        stream.send("play", play);
        if (ended(play.status)) stream.end();
      },
    });
  };
}
