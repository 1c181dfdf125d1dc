import type { Box } from "@doppio/contracts";
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { putBox } from "../api/cache.ts";
import { call, errorText } from "../api/client.ts";
import { formatBytes } from "../lib/labels.ts";
import { minutesUntil, useNow } from "../lib/time.ts";

/**
 * Idle hibernation at a glance: "hibernates in N min" with a keep-awake button while the box
 * runs, the saved memory while it is hibernated, and whether it ever hibernates by itself.
 */
export function IdleCard({ box }: { box: Box }) {
  const qc = useQueryClient();
  const now = useNow(box.idleHibernatesAt !== null, 15_000);
  const keep = useMutation({
    mutationFn: () => call("keepBoxAwake", { params: { slug: box.slug } }),
    onSuccess: (next) => putBox(qc, next),
  });
  let text: string;
  if (box.status === "hibernated") {
    text = `Hibernated: its processes wait in ${box.memoryFileBytes !== null ? formatBytes(box.memoryFileBytes) : "a file"} of saved memory. Start resumes them; opening its URL wakes it too.`;
  } else if (box.idleHibernatesAt) {
    const m = minutesUntil(box.idleHibernatesAt, now);
    text = m === 0 ? "Hibernates now (idle)." : `Hibernates in ${m} min unless it is used.`;
  } else if (box.idleTimeoutMinutes === null) {
    text = "Never hibernates when idle.";
  } else {
    text = `Hibernates after ${box.idleTimeoutMinutes} idle minutes while running.`;
  }
  return (
    <section className="card" aria-labelledby="idle-title">
      <h2 id="idle-title">Idle</h2>
      <p className="muted small" data-testid="idle-text">
        {text}
      </p>
      {box.idleHibernatesAt && (
        <button type="button" className="btn" disabled={keep.isPending} onClick={() => keep.mutate()}>
          {keep.isPending ? "Keep awake…" : "Keep awake"}
        </button>
      )}
      {keep.isError && <p className="error-text">{errorText(keep.error)}</p>}
    </section>
  );
}
