import type { Box } from "@doppio/contracts";
import { CopyButton } from "./CopyButton.tsx";

/** VS Code is private: /access/open hands the signed-in user over to the box host with a token. */
function openCodeHref(codeUrl: string): string {
  const host = new URL(codeUrl).host;
  return `/api/v1/access/open?host=${encodeURIComponent(host)}&next=${encodeURIComponent("/")}`;
}

export function BoxUrls({ box }: { box: Box }) {
  if (!box.urls) {
    return <p className="muted">URLs appear once a server has been chosen for this box.</p>;
  }
  const running = box.status === "running";
  const rows = [
    { name: "Site", url: box.urls.site, href: box.urls.site, open: "Open Site" },
    { name: "VS Code", url: box.urls.code, href: openCodeHref(box.urls.code), open: "Open VS Code" },
  ];
  return (
    <div className="urls">
      <div className="open-buttons">
        {rows.map((r) =>
          running ? (
            <a
              key={r.name}
              className="btn btn-primary"
              href={r.href}
              target="_blank"
              rel="noopener noreferrer"
            >
              {r.open}
            </a>
          ) : (
            <button key={r.name} type="button" className="btn" disabled>
              {r.open}
            </button>
          ),
        )}
      </div>
      {!running && <p className="muted small">Open works while the box is running.</p>}
      <dl className="url-list">
        {rows.map((r) => (
          <div key={r.name} className="url-row">
            <dt>{r.name}</dt>
            <dd>
              <code className="url">{r.url}</code>
              <CopyButton text={r.url} label={`Copy ${r.name} URL`} />
            </dd>
          </div>
        ))}
      </dl>
    </div>
  );
}
