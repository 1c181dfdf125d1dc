import type { Server } from "@doppio/contracts";
import { formatAge } from "../lib/time.ts";
import { BuildImageButton } from "./BuildImageButton.tsx";
import { ServerPlays } from "./ServerPlays.tsx";
import { UsageBar } from "./UsageBar.tsx";
import { WarmPool } from "./WarmPool.tsx";

/** Heartbeats come every few seconds; a minute of silence means the agent is not talking to us. */
const STALE_MS = 60_000;
const gb = (mb: number) => Math.round((mb / 1024) * 10) / 10;

export function ServerCard({ server, now }: { server: Server; now: number }) {
  const beat = server.lastHeartbeatAt ? Date.parse(server.lastHeartbeatAt) : null;
  const online = beat !== null && now - beat < STALE_MS;
  const golden = Object.entries(server.golden);
  return (
    <li className="card server" data-server={server.name}>
      <div className="card-head">
        <h2>{server.name}</h2>
        <span className={`badge ${server.status === "active" ? "badge-running" : "badge-error"}`}>
          <span className="badge-dot" aria-hidden="true" />
          {server.status}
        </span>
      </div>
      <p className="muted small">
        {server.domain} · {server.backend} · agent {server.agentVersion ?? "unknown"}
      </p>
      {server.statusMessage && (
        <p className="error-text small" role="alert">
          {server.statusMessage}
        </p>
      )}
      <p className={online ? "ok-text" : "error-text"}>
        Heartbeat {formatAge(server.lastHeartbeatAt, now)}
        {!online && " (agent not reporting)"}
      </p>
      <div className="usages">
        <UsageBar label="CPU" used={server.used.vcpu} total={server.capacity.vcpu} unit="vCPU" />
        <UsageBar
          label="Memory"
          used={gb(server.used.memoryMb)}
          held={gb(server.reserved.memoryMb)}
          heldBy="warm pool"
          total={gb(server.capacity.memoryMb)}
          unit="GB"
        />
        <UsageBar
          label="Disk"
          used={server.used.diskGb}
          held={server.reserved.diskGb}
          heldBy="warm pool"
          total={server.capacity.diskGb}
          unit="GB"
        />
      </div>
      <h3>Golden snapshots</h3>
      {golden.length === 0 ? (
        <p className="muted small">None reported yet.</p>
      ) : (
        <ul className="golden-list">
          {golden.map(([template, g]) => (
            <li key={template} data-template={template}>
              <span className={`chip chip-${g.status}`}>
                {template}: {g.status}
                {g.version ? ` (v${g.version})` : ""}
              </span>
              <BuildImageButton server={server.name} template={template} />
            </li>
          ))}
        </ul>
      )}
      <WarmPool server={server} />
      <ServerPlays server={server.name} />
    </li>
  );
}
