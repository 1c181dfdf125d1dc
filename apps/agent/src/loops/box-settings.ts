import type { HeartbeatResponse } from "@doppio/contracts";
import type { MemoryRouteTable } from "../edge/routes.ts";
import type { BoxStore } from "../store/boxes.ts";

/**
 * Box settings the control plane changes without a job, applied from each heartbeat answer:
 * today whether anyone's request to the public site may wake the box (`publicWake`). The
 * record keeps it for later jobs and restarts; the edge's route takes it at once. Returns the
 * slugs that changed.
 */
export function applyBoxSettings(
  d: { boxes: BoxStore; routes: MemoryRouteTable },
  expected: HeartbeatResponse["boxes"],
): string[] {
  const changed: string[] = [];
  for (const { slug, publicWake } of expected) {
    if (publicWake === undefined || !d.boxes.setPublicWake(slug, publicWake)) continue;
    const route = d.routes.get(slug);
    if (route) d.routes.set(slug, { ...route, publicWake });
    changed.push(slug);
  }
  return changed;
}
