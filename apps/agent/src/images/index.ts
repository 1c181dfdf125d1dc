import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import type { Logger } from "pino";
import { HostImageBuilder } from "./builder.ts";
import { ImageStore } from "./store.ts";

export { type BuildImageResult, buildImage, HostImageBuilder } from "./builder.ts";
export { ImageError } from "./errors.ts";
export { ImageStore } from "./store.ts";
export { findTemplate, TEMPLATES, type TemplateDescriptor } from "./templates.ts";

/** The checkout the agent runs from: recipes live in its images/ and scripts/. */
export const REPO_DIR = resolve(dirname(fileURLToPath(import.meta.url)), "../../../..");

/**
 * The image builder for the agent's build_image handler, writing into the same images
 * directory the QEMU backend reads (`<dataDir>/images`, vmm/qemu/backend.ts).
 */
export function createHostImageBuilder(opts: {
  dataDir: string;
  log: Logger;
  /** code-server staging, kernel debs; default /var/cache/doppiobox. */
  cacheDir?: string;
  repoDir?: string;
}): { builder: HostImageBuilder; store: ImageStore } {
  const store = new ImageStore(join(opts.dataDir, "images"));
  const builder = new HostImageBuilder({
    repoDir: opts.repoDir ?? REPO_DIR,
    store,
    log: opts.log,
    ...(opts.cacheDir ? { env: { DOPPIO_IMAGE_CACHE: opts.cacheDir } } : {}),
  });
  return { builder, store };
}
