import { useServers } from "../api/queries.ts";
import { EmptyState } from "../components/EmptyState.tsx";
import { ErrorNotice } from "../components/ErrorNotice.tsx";
import { Loading } from "../components/Loading.tsx";
import { ServerCard } from "../components/ServerCard.tsx";
import { useNow } from "../lib/time.ts";

export function ServersPage() {
  const servers = useServers();
  const now = useNow();
  return (
    <>
      <div className="page-head">
        <h1>Servers</h1>
      </div>
      {servers.isPending && <Loading label="Loading servers…" />}
      {servers.isError && <ErrorNotice error={servers.error} onRetry={() => servers.refetch()} />}
      {servers.data?.length === 0 && (
        <EmptyState title="No servers registered">
          <p>Register a server with the control plane so boxes have somewhere to run.</p>
        </EmptyState>
      )}
      {servers.data && servers.data.length > 0 && (
        <ul className="server-list">
          {servers.data.map((s) => (
            <ServerCard key={s.name} server={s} now={now} />
          ))}
        </ul>
      )}
    </>
  );
}
