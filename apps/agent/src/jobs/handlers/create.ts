import { BoxJobPayload } from "@doppio/contracts";
import { AgentError } from "../../errors.ts";
import { defineHandler } from "../registry.ts";
import { boxRecord, freshSecrets, publishRunning, specFromPayload, vmSpec } from "./common.ts";

/**
 * create: allocate an address → record the box → restore from golden (or cold-boot the
 * default template) → publish its routes. Safe to run again after a crash: the address
 * is the same, the secrets are the stored ones, and a VM that already runs is adopted.
 */
export const createHandler = defineHandler({
  schema: BoxJobPayload,
  async run(deps, p, _job, report) {
    const { slug } = p;
    const state = await report.step("check_state", () => deps.executor.inspect(slug));
    // Decide the path before taking an address, so an impossible create leaves nothing behind.
    const golden = state === "running" ? null : await deps.executor.goldenStatus(p.template);
    if (golden && golden.status !== "ready" && p.template !== deps.config.defaultTemplate) {
      throw new AgentError(
        "no_golden",
        `template "${p.template}" has no golden snapshot on this host (${golden.status}); only the default template "${deps.config.defaultTemplate}" may cold-boot`,
        { details: { template: p.template, golden: golden.status } },
      );
    }
    const ip = await report.step("allocate_ip", async () => deps.ipPool.allocate(slug));
    const prev = deps.boxes.get(slug);
    const secrets = prev?.spec.secrets ?? freshSecrets();
    const box = {
      ...boxRecord(deps, slug, ip, specFromPayload(p, secrets), prev),
      desiredState: "running" as const,
    };
    deps.boxes.upsert(box);

    let upstream = state === "running" ? await deps.executor.upstream(slug) : null;
    if (!upstream) {
      const spec = vmSpec(deps, box, deps.boxes.bumpGeneration(slug));
      if (golden?.status === "ready") {
        upstream = await deps.executor.createFromGolden(spec, report);
      } else {
        report.log(
          `no golden snapshot for ${p.template} (${golden?.status}); cold-booting the default template`,
        );
        upstream = await deps.executor.createColdBoot(spec, report);
      }
    }
    const ready = upstream;
    await report.step("add_routes", async () => publishRunning(deps, slug, box.spec, ready));
    return { ip };
  },
});
