import { GITHUB_SIGNIN_ERRORS, type GitHubSignInError, type GitHubStatus } from "@doppio/contracts";
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { call, errorText } from "../api/client.ts";
import { keys } from "../api/keys.ts";
import { useGitHub } from "../api/queries.ts";
import { ErrorNotice } from "../components/ErrorNotice.tsx";
import { Loading } from "../components/Loading.tsx";
import { useLocation } from "../lib/router.tsx";

const NOTICES: Record<string, string> = {
  linked: "GitHub is linked to your account.",
  connected: "The installation is connected: its repositories are listed below.",
};

export function SettingsPage() {
  const github = useGitHub();
  const { search } = useLocation();
  const done = search.get("github");
  const failure = search.get("github_error");
  return (
    <>
      <div className="page-head">
        <h1>Settings</h1>
      </div>
      {done && NOTICES[done] && (
        <div className="notice" role="status">
          <p>{NOTICES[done]}</p>
        </div>
      )}
      {failure && (
        <div className="notice notice-error" role="alert">
          <p>{GITHUB_SIGNIN_ERRORS[failure as GitHubSignInError] ?? "GitHub did not complete."}</p>
        </div>
      )}
      <section aria-labelledby="github-head" className="settings-section">
        <h2 id="github-head">GitHub</h2>
        {github.isPending ? (
          <Loading label="Loading GitHub…" />
        ) : github.isError ? (
          <ErrorNotice error={github.error} onRetry={() => github.refetch()} />
        ) : (
          <GitHubSection status={github.data} />
        )}
      </section>
    </>
  );
}

function GitHubSection({ status }: { status: GitHubStatus }) {
  const qc = useQueryClient();
  const connect = useMutation({
    mutationFn: () => call("connectGitHub", { body: {} }),
    onSuccess: ({ url }) => window.location.assign(url),
  });
  const unlink = useMutation({
    mutationFn: () => call("unlinkGitHub", {}),
    onSuccess: () => void qc.invalidateQueries({ queryKey: keys.github }),
  });
  if (!status.configured) return <p className="muted">GitHub is not configured on this doppiobox.</p>;
  if (!status.account) {
    return (
      <>
        <p className="muted">
          Link your GitHub account to create boxes from your repositories and push from them.
        </p>
        <a className="btn btn-primary" href="/api/v1/auth/github?intent=link">
          Link GitHub
        </a>
      </>
    );
  }
  return (
    <>
      <p>
        Linked as <strong className="mono">{status.account.login}</strong>.
      </p>
      <h3>Installations</h3>
      {status.installations.length === 0 ? (
        <p className="muted">
          None yet: install the app on your account or an organisation to pick repositories.
        </p>
      ) : (
        <ul className="plain-list">
          {status.installations.map((i) => (
            <li key={i.id}>
              <span className="mono">{i.account}</span> ({i.accountType}, {i.repositorySelection}{" "}
              repositories) {i.state !== "active" && <span className="badge">{i.state}</span>}
            </li>
          ))}
        </ul>
      )}
      <h3>Repositories</h3>
      {status.repositories.length === 0 ? (
        <p className="muted">No repositories connected.</p>
      ) : (
        <ul className="plain-list">
          {status.repositories.map((r) => (
            <li key={`${r.installationId}/${r.fullName}`} className="mono">
              {r.fullName}
              {r.private ? " (private)" : ""}
            </li>
          ))}
        </ul>
      )}
      {(connect.isError || unlink.isError) && (
        <div className="notice notice-error" role="alert">
          <p>{errorText(connect.error ?? unlink.error)}</p>
        </div>
      )}
      <div className="row-actions">
        <button
          type="button"
          className="btn btn-primary"
          disabled={connect.isPending}
          onClick={() => connect.mutate()}
        >
          {status.installations.length ? "Connect more repositories" : "Connect repositories"}
        </button>
        {!status.account.createdByGithub && (
          <button type="button" className="btn" disabled={unlink.isPending} onClick={() => unlink.mutate()}>
            Unlink GitHub
          </button>
        )}
      </div>
    </>
  );
}
