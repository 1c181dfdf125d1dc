import type { VmState } from "@doppio/contracts";
import { AgentError, boxRunsOn, failureMessage } from "../../errors.ts";
import type { JobHandler } from "../registry.ts";
import {
  boxRecord,
  freshSecrets,
  publishHibernated,
  publishRunning,
  publishStopped,
  specFromPayload,
} from "./common.ts";

/** States with no VMM and no saved memory: nothing to keep, the box can only be stopped. */
const NO_MEMORY: readonly VmState[] = ["exited", "stopped"];

function memoryLost(state: VmState): string | undefined {
  return NO_MEMORY.includes(state)
    ? `the box's VMM had already ${state === "exited" ? "exited (guest crash or VMM killed)" : "stopped"}: no memory to keep, so the box is stopped instead (its disks are kept)`
    : undefined;
}

/**
 * hibernate: desired state first (so reconcile will not boot it again), routes to the
 * "stopped" page while the executor saves the memory and ends the VMM, then to
 * "hibernated" (a request may wake it); address, disks and TAP name stay for the resume (a
 * `start`). If the save fails while the VMM lives on, the box keeps running and wants to
 * run again, and its routes come back. If the VMM is found dead (before or during the save),
 * there is no memory to keep: the box is stopped plainly (TAP released, disks kept) and the
 * job succeeds saying so (`memoryLost`, and the step that found it), since a stopped box is
 * what hibernate's desired state asks for.
 */
export const hibernateHandler: JobHandler<"hibernate"> = {
  async run(deps, p, _job, report) {
    const state = await report.step("check_state", () => deps.executor.inspect(p.slug), memoryLost);
    const prev = deps.boxes.get(p.slug);
    if (!prev || !(state === "running" || state === "hibernated" || NO_MEMORY.includes(state))) {
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
    let lost = memoryLost(state);
    if (!lost) {
      try {
        const { memoryFileBytes } = await deps.executor.hibernate(p.slug, report);
        publishHibernated(deps, p.slug, spec);
        return { ip: box.ip, memoryFileBytes };
      } catch (err) {
        const after = await deps.executor.inspect(p.slug);
        if (after === "running") {
          deps.boxes.upsert({ ...box, desiredState: "running" });
          if (upstream) publishRunning(deps, p.slug, spec, upstream);
        }
        lost = memoryLost(after);
        if (!lost) throw after === "running" ? boxRunsOn(err) : err;
        lost = `${lost}; saving it failed: ${failureMessage(err)}`.slice(0, 500);
      }
    }
    // Ends what is left of the VMM, discards any partial memory file, releases the TAP and
    // marks the box stopped, so it boots from its disks on the next start.
    await deps.executor.stop(p.slug, report);
    report.log(`hibernate: ${lost}`);
    return { ip: box.ip, memoryFileBytes: 0, memoryLost: lost };
  },
};
