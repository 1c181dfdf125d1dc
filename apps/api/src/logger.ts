import { LOG_REDACT, redactUrl } from "@doppio/contracts";
import { type DestinationStream, type Logger, pino } from "pino";

/** The fields of a request Fastify logs (its own serializer's), with the URL's secrets censored. */
interface LoggedRequest {
  method?: string;
  url?: string;
  host?: string;
  ip?: string;
  socket?: { remotePort?: number };
}

/**
 * Fastify's request serializer with `url` passed through redactUrl: the OAuth callback's
 * `code` and `state` arrive in the query string. The instance's serializers win over
 * Fastify's (fastify/lib/logger-pino.js merges them last).
 */
function req(r: LoggedRequest) {
  return {
    method: r.method,
    url: typeof r.url === "string" ? redactUrl(r.url) : r.url,
    host: r.host,
    remoteAddress: r.ip,
    remotePort: r.socket?.remotePort,
  };
}

/** The control plane's logger: JSON lines, with every secret-bearing field redacted. */
export function createLogger(level: string, destination?: DestinationStream): Logger {
  const options = { level, base: { service: "api" }, redact: LOG_REDACT, serializers: { req } };
  return destination ? pino(options, destination) : pino(options);
}
