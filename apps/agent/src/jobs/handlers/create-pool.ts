import type { BoxJobPayload, JobResultOf } from "@doppio/contracts";
import type { StoredBox } from "../../store/boxes.ts";
import type { StepReporter } from "../../vmm/executor.ts";
import type { HandlerDeps, JobInfo } from "../registry.ts";
import { boxRecord, freshSecrets, publishRunning, specFromPayload, vmSpec } from "./common.ts";

/**
 * The create's warm-pool path: claim a ready parked clone of the template and disk size
 * (or continue the claim this job made before a restart), record the box on the clone's
 * address, hand the running guest the box's identity (a new generation, fresh secrets, a new
 * metadata token) and wait for it to report ready, then publish the routes. Null when no
 * clone is ready, or when the hand-over failed: then the clone and everything recorded for
 * the box are removed (the clone never goes back to the pool) and the caller restores from
 * the golden snapshot as if the pool had been empty.
 */
export async function createFromPool(
  deps: HandlerDeps,
  p: BoxJobPayload,
  job: JobInfo,
  prev: StoredBox | null,
  report: StepReporter,
): Promise<JobResultOf<"create"> | null> {
  const pool = deps.pool;
  const claimParked = deps.executor.claimParked?.bind(deps.executor);
  if (!pool || !claimParked) return null;
  const { slug } = p;
  const parked = pool.claimedFor(slug) ?? pool.claim(p.template, p.diskGb, slug);
  if (!parked?.ip) return null;
  const ip = parked.ip;
  const log = deps.log.child({ box: slug, job: job.id, parked: parked.slug });
  try {
    const secrets = prev?.spec.secrets ?? freshSecrets();
    const box = {
      ...boxRecord(deps, slug, ip, specFromPayload(p, secrets), prev),
      desiredState: "running" as const,
      // Past the parked identity's generation, so the guest sees a new one.
      generation: Math.max(prev?.generation ?? 0, parked.generation),
    };
    // One commit: the box, its generation and its metadata token.
    const spec = deps.boxes.atomically(() => {
      deps.boxes.upsert(box, { createdByJob: job.id });
      return vmSpec(deps, box, deps.boxes.bumpGeneration(slug));
    });
    const upstream = await claimParked(parked.slug, spec, (meta) => pool.deliver(parked.slug, meta), report);
    pool.handedOver(parked.slug);
    await report.step("add_routes", async () => publishRunning(deps, slug, box.spec, upstream));
    log.info("box created from a pool clone");
    return { ip };
  } catch (err) {
    log.warn({ err }, "pool clone hand-over failed; removing it and restoring from the golden snapshot");
    report.log(
      `pool clone ${parked.slug} failed (${(err as Error).message}); restoring from the golden snapshot`,
    );
    await abandon(deps, slug, parked.slug, report);
    return null;
  }
}

/** Removes the clone under either name, the box's record and its address, and the pool row. */
async function abandon(deps: HandlerDeps, slug: string, parked: string, report: StepReporter): Promise<void> {
  for (const name of [slug, parked]) {
    if ((await deps.executor.inspect(name).catch(() => "gone" as const)) !== "gone") {
      await deps.executor.remove(name, report);
    }
  }
  deps.routes.delete(slug);
  deps.boxes.remove(slug);
  deps.ipPool.free(slug);
  await deps.pool?.discard(parked);
}
