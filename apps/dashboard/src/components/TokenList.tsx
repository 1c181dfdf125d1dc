import type { ApiToken } from "@doppio/contracts";
import { formatAge, formatExpiry, useNow } from "../lib/time.ts";

export function TokenList({
  tokens,
  onRevoke,
}: {
  tokens: readonly ApiToken[];
  onRevoke(t: ApiToken): void;
}) {
  const now = useNow(true, 30_000);
  if (tokens.length === 0) return <p className="empty-line muted">No tokens yet.</p>;
  return (
    <ul className="token-list" aria-label="Your API tokens">
      {tokens.map((t) => (
        <li key={t.id} className="token-item" data-token={t.name}>
          <div>
            <strong>{t.name}</strong>
            <span className="muted small">
              <code>{t.prefix}…</code> · created {formatAge(t.createdAt, now)} · last used{" "}
              {formatAge(t.lastUsedAt, now)} · {formatExpiry(t.expiresAt, now)}
            </span>
          </div>
          <button type="button" className="btn btn-small btn-danger-outline" onClick={() => onRevoke(t)}>
            Revoke<span className="visually-hidden"> {t.name}</span>
          </button>
        </li>
      ))}
    </ul>
  );
}
