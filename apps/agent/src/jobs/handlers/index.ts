import { buildRegistry, type JobHandler, type Registry } from "../registry.ts";
import { createHandler } from "./create.ts";
import { deleteHandler } from "./delete.ts";
import { resetHandler, startHandler, stopHandler } from "./lifecycle.ts";
import { buildGoldenHandler, buildImageHandler } from "./template.ts";

/** The dispatch table, keyed by action (no switch anywhere). */
export function defaultRegistry(): Registry {
  return buildRegistry({
    create: createHandler as JobHandler<unknown>,
    start: startHandler as JobHandler<unknown>,
    stop: stopHandler as JobHandler<unknown>,
    delete: deleteHandler as JobHandler<unknown>,
    reset: resetHandler as JobHandler<unknown>,
    build_golden: buildGoldenHandler as JobHandler<unknown>,
    build_image: buildImageHandler as JobHandler<unknown>,
  });
}
