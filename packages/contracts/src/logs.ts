import { z } from "zod";

/**
 * Live box logs. The guest writes its console and its services' output (as
 * `[svc NAME] line`) to the serial console; the agent follows that file and ships
 * complete lines to the control plane, which keeps the recent ones per box and fans
 * them out to the dashboard and the CLI.
 */

/** Longest line kept (bytes of UTF-8 are cut to this many characters). */
export const LOG_LINE_MAX = 4096;
/** Lines one agent request may carry. */
export const LOG_BATCH_MAX = 1000;

/** `console` for the serial console itself, else the guest service's name (`bench`, `code-server`). */
export const LogSource = z
  .string()
  .max(32, { abort: true })
  .regex(/^[a-z0-9][a-z0-9._-]{0,31}$/, "log source must be a short lowercase name");

export const LogLine = z.object({
  /** Increasing per box; a client resumes after the last one it saw. */
  seq: z.number().int().positive(),
  at: z.string(),
  source: LogSource,
  text: z.string(),
});
export type LogLine = z.infer<typeof LogLine>;

export const LogsQuery = z.strictObject({
  /** Only lines after this seq (from a previous page or SSE `id`). */
  after: z.coerce.number().int().nonnegative().optional(),
  /** Without `after`: the newest `tail` lines. */
  tail: z.coerce.number().int().min(0).max(5000).default(200),
  source: LogSource.optional(),
});
export type LogsQuery = z.infer<typeof LogsQuery>;

export const LogsPage = z.object({
  lines: z.array(LogLine),
  /** Pass as `after` to continue; the last line's seq, or the request's `after`. */
  next: z.number().int().nonnegative(),
});
export type LogsPage = z.infer<typeof LogsPage>;

/**
 * Agent -> control plane: complete lines of the box's serial log file `epoch` (the file's
 * creation time in ms: a re-created file, e.g. after delete and create of the same slug,
 * has a higher one), each with the byte offset it starts at, and `end`, the offset after
 * the last line. The control plane keeps each byte range once, so a resend after an agent
 * crash adds nothing twice.
 */
export const LogBatch = z.strictObject({
  epoch: z.number().int().nonnegative(),
  end: z.number().int().nonnegative(),
  lines: z
    .array(
      z.strictObject({
        offset: z.number().int().nonnegative(),
        at: z.string().datetime(),
        source: LogSource,
        text: z.string().max(LOG_LINE_MAX),
      }),
    )
    .max(LOG_BATCH_MAX),
});
export type LogBatch = z.infer<typeof LogBatch>;

export const LogBatchAck = z.object({
  /** The file and offset the control plane's copy ends at; the agent continues from there. */
  epoch: z.number().int().nonnegative(),
  offset: z.number().int().nonnegative(),
  /** Lines stored from this batch (0 for a resend). */
  stored: z.number().int().nonnegative(),
});
export type LogBatchAck = z.infer<typeof LogBatchAck>;
