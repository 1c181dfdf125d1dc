import { LOG_REDACT } from "@doppio/contracts";
import { type DestinationStream, type Logger, pino } from "pino";

/** The control plane's logger: JSON lines, with every secret-bearing field redacted. */
export function createLogger(level: string, destination?: DestinationStream): Logger {
  const options = { level, base: { service: "api" }, redact: LOG_REDACT };
  return destination ? pino(options, destination) : pino(options);
}
