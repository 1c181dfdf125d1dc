/**
 * The pages a visitor sees when the edge refuses a request. Plain, self-contained HTML
 * (no external assets: the box may be the only thing on this host they can reach).
 */
export interface Page {
  status: number;
  html: string;
}

function page(status: number, title: string, body: string): Page {
  const html = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>${title}</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:36rem;margin:15vh auto;padding:0 1rem;color:#222}
h1{font-size:1.4rem}code{background:#f3f3f3;padding:0 .25rem}</style></head>
<body><h1>${title}</h1>${body}</body></html>
`;
  return { status, html };
}

/** What the waking page and the API clients' `Retry-After` ask for: a resume takes about this long. */
export const WAKE_RETRY_SECONDS = 2;

function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

export const pages = {
  noSuchBox: (host: string) =>
    page(404, "No such box", `<p>There is no box at <code>${escapeHtml(host)}</code> on this server.</p>`),
  stopped: (slug: string) =>
    page(
      503,
      "This box is stopped",
      `<p>The box <code>${escapeHtml(slug)}</code> is stopped. Start it from the dashboard and reload this page.</p>`,
    ),
  hibernated: (slug: string) =>
    page(
      503,
      "This box is hibernated",
      `<p>The box <code>${escapeHtml(slug)}</code> is hibernated. Its owner can wake it by opening it from the dashboard.</p>`,
    ),
  /** Reloads itself until the box answers (the edge has asked the control plane to resume it). */
  waking: (slug: string) => ({
    ...page(
      503,
      "Waking up",
      `<p>The box <code>${escapeHtml(slug)}</code> is waking up from hibernation. This page reloads by itself.</p>
<script>setTimeout(function(){location.reload()},${WAKE_RETRY_SECONDS * 1000})</script>
<noscript><meta http-equiv="refresh" content="${WAKE_RETRY_SECONDS}"></noscript>`,
    ),
  }),
  portClosed: (port: number) =>
    page(502, "Port not reachable", `<p>Nothing on this box is reachable on port <code>${port}</code>.</p>`),
  signInRequired: () =>
    page(
      401,
      "Sign-in required",
      "<p>This address is private to the box's owner. Open it from the dashboard to sign in.</p>",
    ),
  badLink: (reason: string) =>
    page(
      401,
      "This link cannot be used",
      `<p>The sign-in link was refused (${escapeHtml(reason)}). Open the box again from the dashboard.</p>`,
    ),
};
