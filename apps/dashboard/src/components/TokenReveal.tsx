import { CopyButton } from "./CopyButton.tsx";

/** The secret of a new token, shown exactly once. */
export function TokenReveal({ name, token, onDone }: { name: string; token: string; onDone(): void }) {
  return (
    <div className="notice notice-success token-reveal" role="status">
      <p>
        <strong>Token “{name}” created.</strong> Copy it now: you will not see it again.
      </p>
      <div className="secret-row">
        <code className="url" data-testid="new-token">
          {token}
        </code>
        <CopyButton text={token} label="Copy token" />
      </div>
      <button type="button" className="btn btn-small" onClick={onDone}>
        I have copied it
      </button>
    </div>
  );
}
