import {
  type BuiltImage,
  isJobAction,
  type JobAction,
  type JobPayloadOf,
  type JobResultOf,
  JobSpec,
} from "@doppio/contracts";
import type { Logger } from "pino";
import type { Clock } from "../clock.ts";
import type { AgentConfig } from "../config.ts";
import type { BoxRoute } from "../edge/routes.ts";
import { AgentError } from "../errors.ts";
import type { ImageStore } from "../images/store.ts";
import type { WarmPool } from "../pool/warm.ts";
import type { BoxStore } from "../store/boxes.ts";
import type { IpPool } from "../store/ip-pool.ts";
import type { Executor, HostNetwork, StepReporter, TemplateSpec } from "../vmm/executor.ts";

/** The write side of the edge's route table (MemoryRouteTable implements it). */
interface RouteWriter {
  get(slug: string): BoxRoute | undefined;
  set(slug: string, route: BoxRoute): void;
  delete(slug: string): boolean;
}

/** Builds a template image into the host's image store (build_image). */
export interface ImageBuilder {
  build(template: TemplateSpec, report: StepReporter): Promise<BuiltImage>;
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
  /** Parked clones a create may claim (pool/warm.ts); absent or null: every create restores. */
  pool?: WarmPool | null;
  clock: Clock;
  log: Logger;
}

export interface JobInfo {
  id: string;
  action: string;
  box: string | null;
  attempt: number;
}

/** Runs one action: its payload and result are the action's contract (JobSpec, JobSuccess). */
export interface JobHandler<A extends JobAction> {
  run(
    deps: HandlerDeps,
    payload: JobPayloadOf<A>,
    job: JobInfo,
    report: StepReporter,
  ): Promise<JobResultOf<A>>;
}

/** One handler per action; a missing one is a compile error. */
export type Handlers = { readonly [A in JobAction]: JobHandler<A> };
/** What the runner dispatches on (tests register only the actions they exercise). */
export type Registry = Partial<Handlers>;

/** A job matched with its handler and its parsed payload, ready to run. */
export interface ResolvedJob {
  action: JobAction;
  run(deps: HandlerDeps, job: JobInfo, report: StepReporter): Promise<JobResultOf<JobAction>>;
}

/** Generic in the action, so the handler and the payload are known to belong together. */
function bind<A extends JobAction>(registry: Registry, action: A, payload: JobPayloadOf<A>): ResolvedJob {
  const handler = registry[action];
  if (!handler) throw new Error(`no handler for ${action}`); // resolveJob checked it
  return { action, run: (deps, job, report) => handler.run(deps, payload, job, report) };
}

/** Finds the handler and validates the payload; a clear AgentError otherwise (the job fails, the agent lives). */
export function resolveJob(
  registry: Registry,
  job: { action: string; box: string | null; payload: unknown },
): ResolvedJob {
  if (!isJobAction(job.action) || !registry[job.action]) {
    throw new AgentError(
      "unknown_action",
      `unknown action "${job.action}": this agent handles ${Object.keys(registry).join(", ")}`,
      { details: { action: job.action } },
    );
  }
  const parsed = JobSpec.safeParse({ action: job.action, payload: job.payload });
  if (!parsed.success) {
    const problems = parsed.error.issues.map(
      (i) => `${i.path.slice(1).join(".") || "(payload)"}: ${i.message}`,
    );
    throw new AgentError("invalid_payload", `invalid ${job.action} payload: ${problems.join("; ")}`, {
      details: { problems },
    });
  }
  const spec = parsed.data;
  if (job.box !== null && "slug" in spec.payload && spec.payload.slug !== job.box) {
    throw new AgentError(
      "invalid_payload",
      `invalid ${job.action} payload: slug "${spec.payload.slug}" is not the job's box "${job.box}"`,
    );
  }
  return bind(registry, spec.action, spec.payload);
}
