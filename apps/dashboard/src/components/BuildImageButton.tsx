import { useMutation } from "@tanstack/react-query";
import { call, errorText } from "../api/client.ts";

/**
 * Queues a build_image job for one template on one server: the agent builds the image
 * from its recipe, then rebuilds the template's golden snapshot from it. Progress shows in
 * the golden status chip (stale/building, then ready) as heartbeats arrive.
 */
export function BuildImageButton({ server, template }: { server: string; template: string }) {
  const build = useMutation({
    mutationFn: () => call("buildImage", { params: { name: server }, body: { template } }),
  });
  return (
    <span className="build-image">
      <button
        type="button"
        className="btn btn-small"
        disabled={build.isPending}
        onClick={() => build.mutate()}
        aria-label={`Build the ${template} image on ${server}`}
      >
        {build.isPending ? "Queuing…" : "Build image"}
      </button>
      {build.isSuccess && (
        <span className="muted small" role="status">
          Build queued (job {build.data.id.slice(0, 8)})
        </span>
      )}
      {build.isError && (
        <span className="error-text small" role="alert">
          {errorText(build.error)}
        </span>
      )}
    </span>
  );
}
