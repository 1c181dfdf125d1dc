import { JOB_ACTIONS, type JobAction } from "@doppio/contracts";
import type { Logger } from "pino";
import type { z } from "zod";
import type { Clock } from "../clock.ts";
import type { AgentConfig } from "../config.ts";
import type { BoxRoute } from "../edge/routes.ts";
import { AgentError } from "../errors.ts";
import type { ImageStore } from "../images/store.ts";
import type { BoxStore } from "../store/boxes.ts";
import type { IpPool } from "../store/ip-pool.ts";
import type { Executor, HostNetwork, StepReporter, TemplateSpec } from "../vmm/executor.ts";

/** The write side of the edge's route table (MemoryRouteTable implements it). */
export interface RouteWriter {
  get(slug: string): BoxRoute | undefined;
  set(slug: string, route: BoxRoute): void;
  delete(slug: string): boolean;
}

/** Builds a template image into the host's image store (build_image). */
export interface ImageBuilder {
  build(template: TemplateSpec, report: StepReporter): Promise<Record<string, unknown>>;
}

/** Everything a handler may touch; passed in by hand from the wiring file. */
export interface HandlerDeps {
  config: AgentConfig;
  executor: Executor;
  network: HostNetwork | null;
  ipPool: IpPool;
  boxes: BoxStore;
  routes: RouteWriter;
  imageBuilder: ImageBuilder | null;
  /** Where template images are kept (and which one the golden must be built from). */
  images: ImageStore | null;
  clock: Clock;
  log: Logger;
}

export interface JobInfo {
  id: string;
  action: string;
  box: string | null;
  attempt: number;
}

export interface JobHandler<P> {
  schema: z.ZodType<P>;
  run(
    deps: HandlerDeps,
    payload: P,
    job: JobInfo,
    report: StepReporter,
  ): Promise<Record<string, unknown> | undefined>;
}

// biome-ignore lint/suspicious/noExplicitAny: a registry holds handlers of different payload types
export type Registry = ReadonlyMap<JobAction, JobHandler<any>>;

export function defineHandler<P>(h: JobHandler<P>): JobHandler<P> {
  return h;
}

/** Finds the handler and validates the payload; a clear AgentError otherwise (the job fails, the agent lives). */
export function resolveJob(
  registry: Registry,
  job: { action: string; box: string | null; payload: unknown },
): { handler: JobHandler<unknown>; payload: unknown } {
  const handler = registry.get(job.action as JobAction);
  if (!handler) {
    throw new AgentError(
      "unknown_action",
      `unknown action "${job.action}": this agent handles ${[...registry.keys()].join(", ")}`,
      { details: { action: job.action } },
    );
  }
  const parsed = handler.schema.safeParse(job.payload);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((i) => `${i.path.join(".") || "(payload)"}: ${i.message}`);
    throw new AgentError("invalid_payload", `invalid ${job.action} payload: ${problems.join("; ")}`, {
      details: { problems },
    });
  }
  const slug = (parsed.data as { slug?: unknown }).slug;
  if (job.box !== null && typeof slug === "string" && slug !== job.box) {
    throw new AgentError(
      "invalid_payload",
      `invalid ${job.action} payload: slug "${slug}" is not the job's box "${job.box}"`,
    );
  }
  return { handler, payload: parsed.data };
}

/** Every action must have a handler: checked when the registry is built. */
export function buildRegistry(handlers: Record<JobAction, JobHandler<unknown>>): Registry {
  for (const a of JOB_ACTIONS) if (!handlers[a]) throw new Error(`no handler for action ${a}`);
  return new Map(Object.entries(handlers) as Array<[JobAction, JobHandler<unknown>]>);
}
