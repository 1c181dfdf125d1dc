import { BOX_SIZES } from "@doppio/contracts";
import { ApiError } from "../api/client.ts";
import { useBox, useJobs } from "../api/queries.ts";
import { BoxActions } from "../components/BoxActions.tsx";
import { BoxCost } from "../components/BoxCost.tsx";
import { BoxUrls } from "../components/BoxUrls.tsx";
import { EmptyState } from "../components/EmptyState.tsx";
import { EnvEditor } from "../components/EnvEditor.tsx";
import { ErrorNotice } from "../components/ErrorNotice.tsx";
import { IdleCard } from "../components/IdleCard.tsx";
import { JobSteps } from "../components/JobSteps.tsx";
import { Loading } from "../components/Loading.tsx";
import { LogsPanel } from "../components/LogsPanel.tsx";
import { StatusBadge } from "../components/StatusBadge.tsx";
import { formatBytes, formatMemory } from "../lib/labels.ts";
import { Link } from "../lib/router.tsx";

export function BoxPage({ slug }: { slug: string }) {
  const box = useBox(slug);
  const jobs = useJobs(slug);

  if (box.isPending) return <Loading label="Loading box…" />;
  if (box.isError) {
    if (box.error instanceof ApiError && box.error.status === 404) {
      return (
        <EmptyState title="Box not found">
          <p>There is no box called “{slug}” in your team. It may have been deleted.</p>
          <Link to="/">Back to boxes</Link>
        </EmptyState>
      );
    }
    return <ErrorNotice error={box.error} onRetry={() => box.refetch()} />;
  }
  const b = box.data;
  const latest = jobs.data?.[0];
  const size = BOX_SIZES[b.size];

  if (b.status === "deleted") {
    return (
      <EmptyState title={`${b.slug} was deleted`}>
        <Link to="/">Back to boxes</Link>
      </EmptyState>
    );
  }

  return (
    <>
      <div className="page-head">
        <div>
          <p className="crumbs">
            <Link to="/">Boxes</Link> /
          </p>
          <h1 className="mono-title">{b.slug}</h1>
          <p className="muted small">
            {b.template} · {b.size} ({size.vcpu} vCPU, {formatMemory(size.memoryMb)}, {size.diskGb} GB)
            {b.server ? ` · on ${b.server}` : ""}
            {b.memoryFileBytes !== null ? ` · saved memory ${formatBytes(b.memoryFileBytes)}` : ""}
          </p>
          <BoxCost slug={b.slug} />
        </div>
        <StatusBadge status={b.status} />
      </div>
      {b.statusReason && b.status === "error" && (
        <div className="notice notice-error" role="alert">
          <p>
            {b.statusReason} {b.errorCode && <code className="error-code">{b.errorCode}</code>}
          </p>
        </div>
      )}
      <div className="box-grid">
        <div className="col">
          <section className="card" aria-labelledby="open-title">
            <h2 id="open-title">Open</h2>
            <BoxUrls box={b} />
          </section>
          <section className="card" aria-labelledby="manage-title">
            <h2 id="manage-title">Manage</h2>
            <BoxActions box={b} />
          </section>
          <IdleCard box={b} />
          <EnvEditor box={b} />
        </div>
        <div className="col">
          {jobs.isPending && <Loading label="Loading progress…" />}
          {jobs.isError && <ErrorNotice error={jobs.error} onRetry={() => jobs.refetch()} />}
          {latest && <JobSteps job={latest} />}
          {jobs.data && <LogsPanel slug={b.slug} jobs={jobs.data} />}
        </div>
      </div>
    </>
  );
}
