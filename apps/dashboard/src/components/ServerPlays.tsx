import type { AnsiblePlay, AnsibleTask, PlayKind } from "@doppio/contracts";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useEffect } from "react";
import { call, errorText } from "../api/client.ts";
import { keys } from "../api/keys.ts";
import { sortedTasks, usePlayStream } from "../lib/play-stream.ts";
import { formatDuration } from "../lib/time.ts";
import { ServerSshForm } from "./ServerSshForm.tsx";

const LABELS: Record<PlayKind, string> = { prepare: "Prepare server", deploy_agent: "Deploy agent" };
const active = (p: AnsiblePlay) => p.status === "pending" || p.status === "running";

/** A server's Ansible plays: start Prepare/Deploy, follow the newest live, cancel it. */
export function ServerPlays({ server }: { server: string }) {
  const qc = useQueryClient();
  const plays = useQuery({
    queryKey: keys.plays(server),
    queryFn: async () => (await call("listPlays", { params: { name: server } })).plays,
  });
  const latest = plays.data?.[0] ?? null;
  const live = usePlayStream(latest?.id ?? null);
  const play = live.play ?? latest;
  const refresh = () => qc.invalidateQueries({ queryKey: keys.plays(server) });
  const start = useMutation({
    mutationFn: (playbook: PlayKind) => call("startPlay", { params: { name: server }, body: { playbook } }),
    onSuccess: refresh,
  });
  const cancel = useMutation({
    mutationFn: (id: string) => call("cancelPlay", { params: { id } }),
    onSuccess: refresh,
  });
  const running = play !== null && active(play);
  const ended = live.play !== null && !active(live.play);
  // A play that ends changes the server (active, error): show it.
  useEffect(() => {
    if (!ended) return;
    qc.invalidateQueries({ queryKey: keys.servers });
    qc.invalidateQueries({ queryKey: keys.plays(server) });
  }, [ended, qc, server]);
  return (
    <section className="plays" aria-label={`Plays on ${server}`}>
      <h3>Provisioning</h3>
      <ServerSshForm server={server} />
      <div className="play-actions">
        {(Object.keys(LABELS) as PlayKind[]).map((kind) => (
          <button
            key={kind}
            type="button"
            className="btn btn-small"
            disabled={running || start.isPending}
            onClick={() => start.mutate(kind)}
          >
            {LABELS[kind]}
          </button>
        ))}
        {running && (
          <button
            type="button"
            className="btn btn-small btn-danger"
            disabled={cancel.isPending}
            onClick={() => cancel.mutate(play.id)}
          >
            Cancel
          </button>
        )}
      </div>
      {(start.isError || cancel.isError) && (
        <p className="error-text small" role="alert">
          {errorText(start.error ?? cancel.error)}
        </p>
      )}
      {play && <PlayView play={play} tasks={sortedTasks(live)} />}
      {plays.data && plays.data.length > 1 && (
        <details className="play-history">
          <summary>Earlier plays ({plays.data.length - 1})</summary>
          <ul>
            {plays.data.slice(1).map((p) => (
              <li key={p.id} data-play={p.id}>
                {LABELS[p.playbook]} · <span className={`chip chip-play-${p.status}`}>{p.status}</span> ·{" "}
                {new Date(p.createdAt).toLocaleString()}
                {p.durationMs !== null && ` · ${formatDuration(p.durationMs)}`}
                {p.error && <span className="error-text small"> · {p.error}</span>}
              </li>
            ))}
          </ul>
        </details>
      )}
    </section>
  );
}

function PlayView({ play, tasks }: { play: AnsiblePlay; tasks: AnsibleTask[] }) {
  const { done, total } = play.progress;
  const c = play.counters;
  return (
    <div className="play" data-play={play.id} data-status={play.status}>
      <p>
        {LABELS[play.playbook]} · <span className={`chip chip-play-${play.status}`}>{play.status}</span>
        {play.durationMs !== null && ` · ${formatDuration(play.durationMs)}`}
      </p>
      <progress value={done} max={Math.max(total, 1)} aria-label={`${done} of ${total} tasks done`} />
      <p className="muted small">
        {done} / {total} tasks · ok {c.ok} · changed {c.changed} · failed {c.failed} · skipped {c.skipped} ·
        unreachable {c.unreachable} · rescued {c.rescued} · ignored {c.ignored}
      </p>
      {play.error && (
        <p className="error-text small" role="alert">
          {play.error}
        </p>
      )}
      {tasks.length > 0 && (
        <ol className="play-tasks">
          {tasks.map((t) => (
            <li key={t.id} data-task-status={t.status}>
              <details>
                <summary>
                  <span className={`chip chip-task-${t.status}`}>{t.status}</span>{" "}
                  {t.role ? `${t.role} : ` : ""}
                  {t.name}
                  {t.durationMs !== null && (
                    <span className="muted small"> {formatDuration(t.durationMs)}</span>
                  )}
                </summary>
                {t.error && <pre className="error-text">{t.error}</pre>}
                {t.output ? <pre>{t.output}</pre> : !t.error && <p className="muted small">No output.</p>}
              </details>
            </li>
          ))}
        </ol>
      )}
    </div>
  );
}
