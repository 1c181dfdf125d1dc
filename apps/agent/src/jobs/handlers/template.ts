import { TemplateJobPayload } from "@doppio/contracts";
import { AgentError } from "../../errors.ts";
import type { TemplateSpec } from "../../vmm/executor.ts";
import { defineHandler, type HandlerDeps } from "../registry.ts";

function templateSpec(deps: HandlerDeps, name: string, version: string): TemplateSpec {
  const t = deps.config.templates.find((x) => x.name === name);
  if (!t) {
    throw new AgentError(
      "unknown_template",
      `template "${name}" is not configured on this host (known: ${deps.config.templates.map((x) => x.name).join(", ")})`,
      { details: { template: name } },
    );
  }
  return { name: t.name, version, readyPorts: t.readyPorts, memoryMb: t.memoryMb, vcpu: t.vcpu };
}

/** build_golden: the executor serialises builds per template and reports its own steps. */
export const buildGoldenHandler = defineHandler({
  schema: TemplateJobPayload,
  async run(deps, p, _job, report) {
    const info = await deps.executor.buildGolden(templateSpec(deps, p.template, p.templateVersion), report);
    if (info.status !== "ready") {
      throw new AgentError(
        "not_available",
        `golden snapshot for ${p.template} ended ${info.status}: ${info.error ?? "no reason given"}`,
      );
    }
    return { template: info.template, version: info.version, status: info.status, builtAt: info.builtAt };
  },
});

/** build_image: delegated to an image builder, which no host has yet. */
export const buildImageHandler = defineHandler({
  schema: TemplateJobPayload,
  async run(deps, p, _job, report) {
    if (!deps.imageBuilder) {
      throw new AgentError(
        "not_available",
        "building images is not available on this host (no image builder configured)",
      );
    }
    return deps.imageBuilder.build(templateSpec(deps, p.template, p.templateVersion), report);
  },
});
