import { AgentError } from "../../errors.ts";
import type { JobHandler } from "../registry.ts";
import {
  boxRecord,
  freshSecrets,
  publishHibernated,
  publishRunning,
  publishStopped,
  specFromPayload,
} from "./common.ts";

/**
 * hibernate: desired state first (so reconcile will not boot it again), routes to the
 * "stopped" page while the executor saves the memory and ends the VMM, then to
 * "hibernated" (a request may wake it); address, disks and TAP name stay for the resume (a
 * `start`). If the save fails while the VMM lives on, the box keeps running and wants to
 * run again, and its routes come back.
 */
export const hibernateHandler: JobHandler<"hibernate"> = {
  async run(deps, p, _job, report) {
    const state = await report.step("check_state", () => deps.executor.inspect(p.slug));
    const prev = deps.boxes.get(p.slug);
    if (!prev || (state !== "running" && state !== "hibernated")) {
      throw new AgentError(
        "not_running",
        `box "${p.slug}" is ${prev ? state : "not on this host"}: only a running box can hibernate`,
        {
          details: { slug: p.slug, state },
        },
      );
    }
    const spec = specFromPayload(p, prev.spec.secrets ?? freshSecrets());
    const box = { ...boxRecord(deps, p.slug, prev.ip, spec, prev), desiredState: "stopped" as const };
    deps.boxes.upsert(box);
    const upstream = state === "running" ? await deps.executor.upstream(p.slug) : null;
    await report.step("remove_routes", async () => publishStopped(deps, p.slug, spec));
    try {
      const { memoryFileBytes } = await deps.executor.hibernate(p.slug, report);
      publishHibernated(deps, p.slug, spec);
      return { ip: box.ip, memoryFileBytes };
    } catch (err) {
      if ((await deps.executor.inspect(p.slug)) === "running") {
        deps.boxes.upsert({ ...box, desiredState: "running" });
        if (upstream) publishRunning(deps, p.slug, spec, upstream);
      }
      throw err;
    }
  },
};
