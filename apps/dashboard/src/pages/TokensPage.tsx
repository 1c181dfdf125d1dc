import type { ApiToken } from "@doppio/contracts";
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { type FormEvent, useState } from "react";
import { call, errorText } from "../api/client.ts";
import { keys } from "../api/keys.ts";
import { useTokens } from "../api/queries.ts";
import { ConfirmDialog } from "../components/ConfirmDialog.tsx";
import { ErrorNotice } from "../components/ErrorNotice.tsx";
import { Loading } from "../components/Loading.tsx";
import { TokenList } from "../components/TokenList.tsx";
import { TokenReveal } from "../components/TokenReveal.tsx";

const DAY_MS = 86_400_000;

export function TokensPage() {
  const qc = useQueryClient();
  const tokens = useTokens();
  const [name, setName] = useState("");
  const [days, setDays] = useState("90");
  const [created, setCreated] = useState<{ name: string; token: string } | null>(null);
  const [revoking, setRevoking] = useState<ApiToken | null>(null);

  const create = useMutation({
    mutationFn: (n: string) =>
      call("createToken", {
        body: {
          name: n,
          ...(days ? { expiresAt: new Date(Date.now() + Number(days) * DAY_MS).toISOString() } : {}),
        },
      }),
    onSuccess: (t) => {
      setCreated({ name: t.name, token: t.token });
      setName("");
      void qc.invalidateQueries({ queryKey: keys.tokens });
    },
  });
  const revoke = useMutation({
    mutationFn: (id: string) => call("revokeToken", { params: { id } }),
    onSuccess: () => {
      setRevoking(null);
      void qc.invalidateQueries({ queryKey: keys.tokens });
    },
  });

  const submit = (e: FormEvent) => {
    e.preventDefault();
    if (name.trim()) create.mutate(name.trim());
  };

  return (
    <>
      <div className="page-head">
        <h1>API tokens</h1>
      </div>
      <p className="muted">Tokens let the doppio CLI and scripts act as you. Revoke any you no longer use.</p>
      <form className="card inline-form" onSubmit={submit}>
        <label className="field grow">
          <span>Token name</span>
          <input
            name="token-name"
            placeholder="e.g. laptop CLI"
            maxLength={100}
            value={name}
            onChange={(e) => setName(e.target.value)}
          />
        </label>
        <label className="field">
          <span>Expires</span>
          <select name="token-expiry" value={days} onChange={(e) => setDays(e.target.value)}>
            <option value="7">in 7 days</option>
            <option value="30">in 30 days</option>
            <option value="90">in 90 days</option>
            <option value="">never</option>
          </select>
        </label>
        <button type="submit" className="btn btn-primary" disabled={!name.trim() || create.isPending}>
          {create.isPending ? "Creating…" : "Create token"}
        </button>
      </form>
      {create.isError && <ErrorNotice error={create.error} />}
      {created && <TokenReveal name={created.name} token={created.token} onDone={() => setCreated(null)} />}
      {tokens.isPending && <Loading label="Loading tokens…" />}
      {tokens.isError && <ErrorNotice error={tokens.error} onRetry={() => tokens.refetch()} />}
      {tokens.data && <TokenList tokens={tokens.data} onRevoke={setRevoking} />}
      <ConfirmDialog
        open={revoking !== null}
        title={`Revoke “${revoking?.name ?? ""}”?`}
        confirmLabel="Revoke token"
        danger
        busy={revoke.isPending}
        onClose={() => setRevoking(null)}
        onConfirm={() => revoking && revoke.mutate(revoking.id)}
      >
        <p>Anything using this token stops working at once. This cannot be undone.</p>
        {revoke.isError && <p className="error-text">{errorText(revoke.error)}</p>}
      </ConfirmDialog>
    </>
  );
}
