import { BOX_SIZES, type Box } from "@doppio/contracts";
import { formatMemory } from "../lib/labels.ts";
import { Link } from "../lib/router.tsx";
import { StatusBadge } from "./StatusBadge.tsx";

export function BoxListItem({ box }: { box: Box }) {
  const size = BOX_SIZES[box.size];
  return (
    <li className="box-item" data-slug={box.slug}>
      <div className="box-item-main">
        <Link to={`/boxes/${box.slug}`} className="box-name">
          {box.slug}
        </Link>
        <span className="muted small">
          {box.template} · {box.size} ({size.vcpu} vCPU, {formatMemory(size.memoryMb)})
        </span>
        {box.status === "error" && box.statusReason && (
          <span className="error-text small">{box.statusReason}</span>
        )}
      </div>
      <StatusBadge status={box.status} />
    </li>
  );
}
