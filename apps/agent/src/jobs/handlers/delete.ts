import type { JobHandler } from "../registry.ts";

/** delete: routes off first (no traffic to a dying VM), then every artifact, then the address. */
export const deleteHandler: JobHandler<"delete"> = {
  async run(deps, p, _job, report) {
    const { slug } = p;
    const state = await report.step("check_state", () => deps.executor.inspect(slug));
    await report.step("remove_routes", async () => {
      deps.routes.delete(slug);
    });
    if (state !== "gone") await deps.executor.remove(slug, report);
    await report.step("release_ip", async () => {
      deps.ipPool.free(slug);
      deps.boxes.remove(slug);
    });
    return {};
  },
};
