import { useBoxes } from "../api/queries.ts";
import { BoxListItem } from "../components/BoxListItem.tsx";
import { EmptyState } from "../components/EmptyState.tsx";
import { ErrorNotice } from "../components/ErrorNotice.tsx";
import { Loading } from "../components/Loading.tsx";
import { Link } from "../lib/router.tsx";

export function BoxesPage() {
  const boxes = useBoxes();
  return (
    <>
      <div className="page-head">
        <h1>Boxes</h1>
        <Link to="/new" className="btn btn-primary">
          Create box
        </Link>
      </div>
      {boxes.isPending && <Loading label="Loading boxes…" />}
      {boxes.isError && <ErrorNotice error={boxes.error} onRetry={() => boxes.refetch()} />}
      {boxes.data?.length === 0 && (
        <EmptyState title="No boxes yet">
          <p>A box is a Frappe bench with a running site and VS Code in your browser.</p>
          <Link to="/new" className="btn btn-primary">
            Create your first box
          </Link>
        </EmptyState>
      )}
      {boxes.data && boxes.data.length > 0 && (
        <ul className="box-list" aria-label="Your boxes">
          {boxes.data.map((b) => (
            <BoxListItem key={b.slug} box={b} />
          ))}
        </ul>
      )}
    </>
  );
}
