import type { BoxStatus } from "@doppio/contracts";
import { BUSY_STATUSES, STATUS_LABELS } from "../lib/labels.ts";

export function StatusBadge({ status }: { status: BoxStatus }) {
  const busy = BUSY_STATUSES.includes(status);
  return (
    <span className={`badge badge-${status}${busy ? " badge-busy" : ""}`} data-status={status}>
      <span className="badge-dot" aria-hidden="true" />
      {STATUS_LABELS[status]}
    </span>
  );
}
