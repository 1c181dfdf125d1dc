import type { Handlers } from "../registry.ts";
import { createHandler } from "./create.ts";
import { deleteHandler } from "./delete.ts";
import { hibernateHandler } from "./hibernate.ts";
import { resetHandler, startHandler, stopHandler } from "./lifecycle.ts";
import { buildGoldenHandler, buildImageHandler } from "./template.ts";

/** The dispatch table, keyed by action (no switch anywhere); its type requires every action. */
export function defaultRegistry(): Handlers {
  return {
    create: createHandler,
    start: startHandler,
    stop: stopHandler,
    delete: deleteHandler,
    reset: resetHandler,
    hibernate: hibernateHandler,
    build_golden: buildGoldenHandler,
    build_image: buildImageHandler,
  };
}
