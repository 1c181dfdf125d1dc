export interface Row {
  id: number;
  key: string;
  value: string;
}

interface Props {
  row: Row;
  index: number;
  problem: string | null;
  onChange(row: Row): void;
  onRemove(): void;
}

export function EnvRow({ row, index, problem, onChange, onRemove }: Props) {
  const n = index + 1;
  const errId = `env-err-${row.id}`;
  return (
    <div className="env-row">
      <label className="visually-hidden" htmlFor={`env-key-${row.id}`}>
        Name of variable {n}
      </label>
      <input
        id={`env-key-${row.id}`}
        className="mono"
        placeholder="NAME"
        spellCheck={false}
        autoCapitalize="off"
        value={row.key}
        aria-invalid={problem ? true : undefined}
        aria-describedby={problem ? errId : undefined}
        onChange={(e) => onChange({ ...row, key: e.target.value.trim() })}
      />
      <label className="visually-hidden" htmlFor={`env-val-${row.id}`}>
        Value of variable {n}
      </label>
      <input
        id={`env-val-${row.id}`}
        className="mono"
        placeholder="value"
        spellCheck={false}
        value={row.value}
        onChange={(e) => onChange({ ...row, value: e.target.value })}
      />
      <button type="button" className="btn btn-small" onClick={onRemove} aria-label={`Remove variable ${n}`}>
        Remove
      </button>
      {problem && (
        <p id={errId} className="error-text env-problem">
          {problem}
        </p>
      )}
    </div>
  );
}
