import type { BoxJobPayload } from "@doppio/contracts";
import { AgentError } from "../../errors.ts";
import type { StoredBox } from "../../store/boxes.ts";
import type { Upstream } from "../../vmm/executor.ts";
import type { HandlerDeps, JobHandler } from "../registry.ts";
import {
  boxRecord,
  freshSecrets,
  publishRunning,
  publishStopped,
  specFromPayload,
  vmSpec,
} from "./common.ts";

/** The stored box refreshed with the payload's intent; fails clearly if the box never lived here. */
function knownBox(deps: HandlerDeps, p: BoxJobPayload, state: string): Omit<StoredBox, "updatedAt"> {
  const prev = deps.boxes.get(p.slug);
  if (!prev && state === "gone") {
    throw new AgentError("box_not_on_host", `box "${p.slug}" does not exist on this host`, {
      details: { slug: p.slug },
    });
  }
  // A box whose record was lost but whose disks are here is adopted again (same address).
  const ip = prev?.ip ?? deps.ipPool.allocate(p.slug);
  return boxRecord(deps, p.slug, ip, specFromPayload(p, prev?.spec.secrets ?? freshSecrets()), prev);
}

/**
 * Brings the box up; when that fails and its VM is not running, the box's desired state goes
 * back to stopped: the control plane shows it in error, so reconcile must not start it later
 * (say, once a full disk has room again) behind the control plane's back. The user's next
 * start asks again. Best effort: a store that cannot write either leaves the intent as it was.
 */
async function bringUp(deps: HandlerDeps, slug: string, up: () => Promise<Upstream>): Promise<Upstream> {
  try {
    return await up();
  } catch (err) {
    try {
      if ((await deps.executor.inspect(slug)) !== "running") deps.boxes.setDesired(slug, "stopped");
    } catch (standDown) {
      deps.log.warn({ err: standDown, slug }, "could not record a failed start as stopped");
    }
    throw err;
  }
}

/**
 * start: cold-boot from the box's own disks, or resume a hibernated box's memory (the
 * executor decides from what is on the host); a box already running is adopted as is.
 */
export const startHandler: JobHandler<"start"> = {
  async run(deps, p, _job, report) {
    const state = await report.step("check_state", () => deps.executor.inspect(p.slug));
    const box = { ...knownBox(deps, p, state), desiredState: "running" as const };
    deps.boxes.upsert(box);
    let upstream = state === "running" ? await deps.executor.upstream(p.slug) : null;
    upstream ??= await bringUp(deps, p.slug, () =>
      deps.executor.start(vmSpec(deps, box, deps.boxes.bumpGeneration(p.slug)), report),
    );
    const ready = upstream;
    await report.step("add_routes", async () => publishRunning(deps, p.slug, box.spec, ready));
    return { ip: box.ip };
  },
};

/** stop: desired state first (so reconcile will not restart it), then kill the VMM; disks stay. */
export const stopHandler: JobHandler<"stop"> = {
  async run(deps, p, _job, report) {
    const state = await report.step("check_state", () => deps.executor.inspect(p.slug));
    const box = { ...knownBox(deps, p, state), desiredState: "stopped" as const };
    deps.boxes.upsert(box);
    await report.step("remove_routes", async () => publishStopped(deps, p.slug, box.spec));
    // A hibernated box's saved memory goes too: a stopped box boots from its disks. An exited
    // VMM (crashed, killed) still holds its TAP and is not marked stopped until stop runs.
    if (state === "running" || state === "hibernated" || state === "exited")
      await deps.executor.stop(p.slug, report);
    return { ip: box.ip };
  },
};

/** reset: rebuild from golden keeping slug, address and URLs; a new clone gets new secrets. */
export const resetHandler: JobHandler<"reset"> = {
  async run(deps, p, job, report) {
    const state = await report.step("check_state", () => deps.executor.inspect(p.slug));
    const known = knownBox(deps, p, state);
    // A retried reset (after a crash) keeps the secrets its first attempt gave the clone.
    const secrets = job.attempt > 1 ? known.spec.secrets : freshSecrets();
    const box = { ...known, desiredState: "running" as const, spec: { ...known.spec, secrets } };
    deps.boxes.upsert(box);
    const upstream = await bringUp(deps, p.slug, () =>
      deps.executor.reset(vmSpec(deps, box, deps.boxes.bumpGeneration(p.slug)), report),
    );
    await report.step("add_routes", async () => publishRunning(deps, p.slug, box.spec, upstream));
    return { ip: box.ip };
  },
};
