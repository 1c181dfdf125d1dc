import type { Server } from "@doppio/contracts";
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useState } from "react";
import { call, errorText } from "../api/client.ts";
import { keys } from "../api/keys.ts";

/**
 * A server's warm pool per template: clones ready to claim and being made (as its agent last
 * reported), the size it aims at, and a field to set the size (admins only reach this page).
 * Templates with a golden snapshot but no pool yet are listed too, so a pool can be started.
 */
export function WarmPool({ server }: { server: Server }) {
  const templates = [
    ...new Set([...server.warmPool.map((p) => p.template), ...Object.keys(server.golden)]),
  ].sort();
  if (templates.length === 0) return null;
  return (
    <>
      <h3>Warm pool</h3>
      <ul className="golden-list warm-pool">
        {templates.map((template) => (
          <WarmPoolRow
            key={template}
            server={server.name}
            template={template}
            pool={server.warmPool.find((p) => p.template === template) ?? null}
          />
        ))}
      </ul>
    </>
  );
}

function WarmPoolRow({
  server,
  template,
  pool,
}: {
  server: string;
  template: string;
  pool: Server["warmPool"][number] | null;
}) {
  const qc = useQueryClient();
  const [size, setSize] = useState(String(pool?.size ?? pool?.target ?? 0));
  const save = useMutation({
    mutationFn: () =>
      call("setWarmPool", { params: { name: server }, body: { sizes: { [template]: Number(size) } } }),
    onSuccess: () => qc.invalidateQueries({ queryKey: keys.servers }),
  });
  const ready = pool?.ready ?? 0;
  return (
    <li data-template={template} data-pool-ready={ready}>
      <span className={`chip ${ready > 0 ? "chip-ready" : "chip-building"}`}>
        {template}: {ready} ready
        {pool?.filling ? `, ${pool.filling} filling` : ""} of {pool?.target ?? 0}
      </span>
      <form
        className="inline-form"
        onSubmit={(e) => {
          e.preventDefault();
          save.mutate();
        }}
      >
        <label className="small">
          Size{" "}
          <input
            type="number"
            min={0}
            max={32}
            value={size}
            onChange={(e) => setSize(e.target.value)}
            aria-label={`Warm pool size for ${template} on ${server}`}
            style={{ width: "4em" }}
          />
        </label>{" "}
        <button type="submit" className="btn btn-small" disabled={save.isPending}>
          {save.isPending ? "Saving…" : "Set"}
        </button>
        {save.isError && (
          <span className="error-text small" role="alert">
            {errorText(save.error)}
          </span>
        )}
      </form>
    </li>
  );
}
