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
