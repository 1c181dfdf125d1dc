import { AgentError, failureMessage } from "../../errors.ts";
import { goldenStatus } from "../../images/golden-status.ts";
import type { GoldenInfo, StepReporter, TemplateSpec } from "../../vmm/executor.ts";
import type { HandlerDeps, JobHandler } from "../registry.ts";

/**
 * The template as configured on this host, at the control plane's `version`, built from the
 * image store's current image (or, without one, the image named by the template version:
 * the layout scripts/build-image.sh writes).
 */
async function templateSpec(deps: HandlerDeps, name: string, version: string): Promise<TemplateSpec> {
  const t = deps.config.templates.find((x) => x.name === name);
  if (!t) {
    throw new AgentError(
      "unknown_template",
      `template "${name}" is not configured on this host (known: ${deps.config.templates.map((x) => x.name).join(", ")})`,
      { details: { template: name } },
    );
  }
  const current = deps.images ? await deps.images.current(t.name) : null;
  return {
    name: t.name,
    version,
    imageVersion: current?.version ?? version,
    readyPorts: t.readyPorts,
    memoryMb: t.memoryMb,
    vcpu: t.vcpu,
  };
}

/** Builds the golden from `spec.imageVersion`; on success that image's golden is fresh. */
async function buildGolden(
  deps: HandlerDeps,
  spec: TemplateSpec,
  report: StepReporter,
): Promise<GoldenInfo & { status: "ready" }> {
  const info = await deps.executor.buildGolden(spec, report);
  if (info.status !== "ready") {
    throw new AgentError(
      "not_available",
      `golden snapshot for ${spec.name} ended ${info.status}: ${info.error ?? "no reason given"}`,
    );
  }
  await deps.images?.markGoldenFresh(spec.name, spec.imageVersion);
  return { ...info, status: info.status };
}

/** build_golden: the executor serialises builds per template and reports its own steps. */
export const buildGoldenHandler: JobHandler<"build_golden"> = {
  async run(deps, p, _job, report) {
    const spec = await templateSpec(deps, p.template, p.templateVersion);
    const info = await buildGolden(deps, spec, report);
    return {
      template: info.template,
      version: info.version,
      imageVersion: spec.imageVersion,
      status: info.status,
      builtAt: info.builtAt,
    };
  },
};

/**
 * build_image: builds the image into the store; unless the template's golden is already
 * ready from that image (a stale, missing or failed one), builds the golden from it in the
 * same job, so the host offers the template again only once new boxes restore from the new
 * image. Boxes already running keep the golden build their disks back onto.
 */
export const buildImageHandler: JobHandler<"build_image"> = {
  async run(deps, p, _job, report) {
    if (!deps.imageBuilder || !deps.images) {
      throw new AgentError(
        "not_available",
        "building images is not available on this host (no image builder configured)",
      );
    }
    const images = deps.images;
    const requested = await templateSpec(deps, p.template, p.templateVersion);
    const built = await deps.imageBuilder.build(requested, report);
    // Resolved again: the build may have made a new image current.
    const spec = await templateSpec(deps, p.template, p.templateVersion);
    let golden = await goldenStatus(deps.executor, images, spec.name);
    let goldenRebuilt = false;
    // Stale (older image), missing (first image of the template) or failed: new boxes need a
    // golden of this image before the host offers the template again.
    if (golden.status !== "ready") {
      report.log(
        `golden snapshot of ${spec.name} is ${golden.status}; building it from image ${spec.imageVersion}`,
      );
      try {
        await buildGolden(deps, spec, report);
      } catch (err) {
        throw new AgentError(
          "not_available",
          `image ${spec.name}@${spec.imageVersion} was built, but rebuilding the golden snapshot from it failed (the template stays stale on this host): ${failureMessage(err)}`,
          { cause: err, details: { template: spec.name, imageVersion: spec.imageVersion } },
        );
      }
      goldenRebuilt = true;
      golden = await goldenStatus(deps.executor, images, spec.name);
    }
    return {
      ...built,
      imageVersion: spec.imageVersion,
      goldenRebuilt,
      golden: { status: golden.status, version: golden.version, imageVersion: golden.imageVersion },
      goldenStale: golden.status === "stale",
    };
  },
};
