import {
  type Box,
  ENV_MAX_BYTES,
  ENV_NAME_RE,
  ENV_VALUE_MAX,
  ENV_VARS_MAX,
  envBytes,
} from "@doppio/contracts";
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { type FormEvent, useEffect, useState } from "react";
import { putBox } from "../api/cache.ts";
import { call, errorText } from "../api/client.ts";
import { EnvRow, type Row } from "./EnvRow.tsx";

let rowId = 0;
const toRows = (env: Record<string, string>): Row[] =>
  Object.entries(env).map(([key, value]) => ({ id: rowId++, key, value }));

function problem(row: Row, rows: readonly Row[]): string | null {
  if (row.key === "") return row.value === "" ? null : "Give this variable a name.";
  if (!ENV_NAME_RE.test(row.key)) return "Use letters, digits and _, not starting with a digit.";
  if (rows.some((r) => r.id !== row.id && r.key === row.key)) return "This name is used twice.";
  if (row.value.length > ENV_VALUE_MAX) return `Values are at most ${ENV_VALUE_MAX} characters.`;
  return null;
}

/** Key/value rows saved as the box's env; the box reads them when it next starts. */
export function EnvEditor({ box }: { box: Box }) {
  const qc = useQueryClient();
  const [rows, setRows] = useState<Row[]>(() => toRows(box.env));
  const [dirty, setDirty] = useState(false);
  const [saved, setSaved] = useState(false);
  const serverEnv = JSON.stringify(box.env);

  // Someone else (another tab, the CLI) changed the env: follow it unless we are mid-edit.
  useEffect(() => {
    if (!dirty) setRows(toRows(JSON.parse(serverEnv) as Record<string, string>));
  }, [serverEnv, dirty]);

  const save = useMutation({
    mutationFn: (env: Record<string, string>) =>
      call("updateBox", { params: { slug: box.slug }, body: { env } }),
    onSuccess: (next) => {
      putBox(qc, next);
      setDirty(false);
      setSaved(true);
    },
  });

  const problems = rows.map((r) => problem(r, rows));
  const filled = rows.filter((r) => r.key !== "");
  // The box's metadata carries the env, so the whole set has a size budget too.
  const bytes = envBytes(Object.fromEntries(filled.map((r) => [r.key, r.value])));
  const invalid = problems.some(Boolean) || filled.length > ENV_VARS_MAX || bytes > ENV_MAX_BYTES;

  const edit = (next: Row[]) => {
    setRows(next);
    setDirty(true);
    setSaved(false);
  };
  const submit = (e: FormEvent) => {
    e.preventDefault();
    if (invalid) return;
    save.mutate(Object.fromEntries(filled.map((r) => [r.key, r.value])));
  };

  return (
    <section className="card" aria-labelledby="env-title">
      <div className="card-head">
        <h2 id="env-title">Environment variables</h2>
        <span className="muted">Applied on next start</span>
      </div>
      <form onSubmit={submit} noValidate>
        {rows.length === 0 && <p className="muted">No variables yet.</p>}
        {rows.length > 0 && (
          <div className="env-rows">
            {rows.map((row, i) => (
              <EnvRow
                key={row.id}
                row={row}
                index={i}
                problem={problems[i] ?? null}
                onChange={(r) => edit(rows.map((x) => (x.id === r.id ? r : x)))}
                onRemove={() => edit(rows.filter((x) => x.id !== row.id))}
              />
            ))}
          </div>
        )}
        {filled.length > ENV_VARS_MAX && <p className="error-text">At most {ENV_VARS_MAX} variables.</p>}
        {bytes > ENV_MAX_BYTES && (
          <p className="error-text">
            Too large: {bytes} bytes of {ENV_MAX_BYTES}. Shorten or remove some values.
          </p>
        )}
        <div className="row-actions">
          <button
            type="button"
            className="btn"
            onClick={() => edit([...rows, { id: rowId++, key: "", value: "" }])}
          >
            Add variable
          </button>
          <button type="submit" className="btn btn-primary" disabled={!dirty || invalid || save.isPending}>
            {save.isPending ? "Saving…" : "Save variables"}
          </button>
        </div>
        <p className="muted small" aria-live="polite">
          {saved ? "Saved. The box picks these up the next time it starts." : ""}
        </p>
        {save.isError && (
          <div className="notice notice-error" role="alert">
            <p>{errorText(save.error)}</p>
          </div>
        )}
      </form>
    </section>
  );
}
