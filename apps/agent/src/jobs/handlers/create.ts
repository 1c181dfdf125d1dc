import { AgentError } from "../../errors.ts";
import type { StepReporter, VmSpec } from "../../vmm/executor.ts";
import type { HandlerDeps, JobHandler } from "../registry.ts";
import { boxRecord, freshSecrets, publishRunning, specFromPayload, vmSpec } from "./common.ts";
import { createFromPool } from "./create-pool.ts";

/**
 * create: allocate an address → record the box → restore from golden (or cold-boot the
 * default template) → publish its routes. Safe to run again after a crash: the address
 * is the same, the secrets are the stored ones, and a VM that already runs is adopted.
 * A create that fails after taking an address gives back what it took (see undoCreate).
 */
export const createHandler: JobHandler<"create"> = {
  async run(deps, p, job, report) {
    const { slug } = p;
    // Both reads at once (the golden's status is not needed when the VM already runs).
    const [state, goldenNow] = await report.step("check_state", () =>
      Promise.all([deps.executor.inspect(slug), deps.executor.goldenStatus(p.template)]),
    );
    // Decide the path before taking an address, so an impossible create leaves nothing behind.
    const golden = state === "running" ? null : goldenNow;
    if (golden && golden.status !== "ready" && p.template !== deps.config.defaultTemplate) {
      throw new AgentError(
        "no_golden",
        `template "${p.template}" has no golden snapshot on this host (${golden.status}); only the default template "${deps.config.defaultTemplate}" may cold-boot`,
        { details: { template: p.template, golden: golden.status } },
      );
    }
    const prev = deps.boxes.get(slug);
    // Only a box this job brought into being (in this attempt or an earlier one) may be
    // undone; one recorded by an earlier job, or a VM already on the host, keeps its volume.
    const ours = prev ? deps.boxes.createdByJob(slug) === job.id : state === "gone";
    // A parked clone from the warm pool when one is ready (or this job already claimed one
    // before a restart); if the hand-over fails, the clone is removed and the golden path runs.
    if (
      deps.pool &&
      golden?.status === "ready" &&
      ((state === "gone" && !prev) || deps.pool.claimedFor(slug))
    ) {
      const claimed = await createFromPool(deps, p, job, prev, report);
      if (claimed) return claimed;
    }
    try {
      const ip = await report.step("allocate_ip", async () => deps.ipPool.allocate(slug));
      const secrets = prev?.spec.secrets ?? freshSecrets();
      const box = {
        ...boxRecord(deps, slug, ip, specFromPayload(p, secrets), prev),
        desiredState: "running" as const,
      };
      const running = state === "running" ? await deps.executor.upstream(slug) : null;
      // The box, and for a new boot its generation and metadata token, in one commit before
      // anything is made for it.
      const spec = deps.boxes.atomically(() => {
        deps.boxes.upsert(box, { createdByJob: job.id });
        return running ? null : vmSpec(deps, box, deps.boxes.bumpGeneration(slug));
      });
      const launch = async (spec: VmSpec) => {
        if (golden?.status === "ready") return deps.executor.createFromGolden(spec, report);
        report.log(
          `no golden snapshot for ${p.template} (${golden?.status}); cold-booting the default template`,
        );
        return deps.executor.createColdBoot(spec, report);
      };
      const ready = running ?? (await launch(spec!));
      await report.step("add_routes", async () => publishRunning(deps, slug, box.spec, ready));
      return { ip };
    } catch (err) {
      if (ours) await undoCreate(deps, slug, report, job.id);
      throw err;
    }
  },
};

/**
 * After a failed create: whatever VM artifacts are left (executors clean up their own
 * failed launch, but not every failure is theirs), then the route, the box's record and its
 * address, so the address is free again and reconcile does not try to start a box that
 * never was. If the VM cannot be removed, its address stays taken: it may still be in use,
 * and a delete (which removes again) releases both.
 */
async function undoCreate(deps: HandlerDeps, slug: string, report: StepReporter, job: string): Promise<void> {
  const log = deps.log.child({ box: slug, job });
  try {
    if ((await deps.executor.inspect(slug)) !== "gone") await deps.executor.remove(slug, report);
  } catch (err) {
    log.error({ err }, "failed create: its VM could not be removed; its address stays allocated");
    return;
  }
  if (deps.ipPool.get(slug) === null && deps.boxes.get(slug) === null) return;
  await report
    .step("release_ip", async () => {
      deps.routes.delete(slug);
      deps.boxes.remove(slug);
      deps.ipPool.free(slug);
    })
    .catch((err: unknown) => log.error({ err }, "failed create: releasing its address failed"));
  log.info("failed create undone: address and disks released");
}
