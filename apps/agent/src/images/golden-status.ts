import type { Executor, GoldenInfo } from "../vmm/executor.ts";
import type { ImageStore } from "./store.ts";

/**
 * The golden status the host reports (heartbeat, agent API): the executor's, except that a
 * ready golden made from an older image than the store's current one is "stale", so the
 * control plane stops placing new boxes on it until it is rebuilt. Backend-agnostic: the
 * executors only record which image version each build booted.
 */
export async function goldenStatus(
  executor: Pick<Executor, "goldenStatus">,
  images: ImageStore | null,
  template: string,
): Promise<GoldenInfo> {
  const g = await executor.goldenStatus(template);
  if (g.status !== "ready" || !images) return g;
  const current = await images.current(template);
  // No current.json: images laid out by scripts/build-image.sh, nothing to compare with.
  if (!current) return g;
  const flagged = (await images.goldenStale(template))?.version === current.version;
  const otherImage = g.imageVersion !== null && g.imageVersion !== current.version;
  return flagged || otherImage ? { ...g, status: "stale" } : g;
}
