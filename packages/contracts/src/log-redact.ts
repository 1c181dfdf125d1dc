/**
 * What pino must never print, for the control plane and the agent alike: every field named
 * like a secret, at the top of a logged object or up to two levels down (`req.headers.
 * authorization`, `err.cause.…`), cookies being set, and the parameters of failed SQL
 * queries (which carry password and token hashes).
 */
const SECRET_KEYS = [
  "password",
  "passwordHash",
  "adminPassword",
  "token",
  "tokenHash",
  "agentToken",
  "serverToken",
  "apiToken",
  "metricsToken",
  "metadata_token",
  "secret",
  "secrets",
  "privateKey",
  "authorization",
  "cookie",
];

export const LOG_REDACT = {
  paths: [
    ...SECRET_KEYS.flatMap((key) => [key, `*.${key}`, `*.*.${key}`]),
    '["set-cookie"]',
    '*["set-cookie"]',
    '*.*["set-cookie"]',
    "err.params",
    "err.cause.params",
  ],
  censor: "[redacted]",
};

/**
 * Query parameters whose values never reach a log: OAuth's `code` and `state` (GitHub's
 * callback carries both; each is single use, but a log is no place for them).
 */
const SECRET_QUERY_PARAMS = new Set(["code", "state"]);

/** `url` (a request target, path and query) with the values of secret query parameters censored. */
export function redactUrl(url: string): string {
  const q = url.indexOf("?");
  if (q < 0) return url;
  const hash = url.indexOf("#", q);
  const query = url.slice(q + 1, hash < 0 ? undefined : hash);
  const parts = query.split("&").map((pair) => {
    const eq = pair.indexOf("=");
    const raw = (eq < 0 ? pair : pair.slice(0, eq)).replaceAll("+", " ");
    let name = raw;
    try {
      name = decodeURIComponent(raw);
    } catch {
      // A malformed escape: judge the name as written.
    }
    return SECRET_QUERY_PARAMS.has(name.trim().toLowerCase())
      ? `${pair.slice(0, eq < 0 ? pair.length : eq)}=${LOG_REDACT.censor}`
      : pair;
  });
  return `${url.slice(0, q + 1)}${parts.join("&")}${hash < 0 ? "" : url.slice(hash)}`;
}
