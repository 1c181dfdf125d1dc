import { TASK_STATUSES } from "@doppio/contracts";
import { z } from "zod";

/**
 * The JSON lines provision/ansible/callback_plugins/doppio_jsonl.py prints, one event per
 * line: the task list when a play starts, each task's start and result, the stats at the end.
 */
const PlannedTask = z.object({ id: z.string(), name: z.string(), role: z.string().nullable() });
/** When Ansible reported it (ms since the epoch, this machine's clock): task times come from it. */
const At = z.number().int().positive();
export const CallbackEvent = z.discriminatedUnion("event", [
  z.object({ event: z.literal("plan"), play: z.string(), tasks: z.array(PlannedTask) }),
  z.object({
    event: z.literal("task_start"),
    id: z.string(),
    name: z.string(),
    role: z.string().nullable(),
    handler: z.boolean(),
    at: At,
  }),
  z.object({
    event: z.literal("task_result"),
    id: z.string(),
    host: z.string(),
    status: z.enum(TASK_STATUSES),
    changed: z.boolean(),
    output: z.string(),
    error: z.string().nullable(),
    at: At,
  }),
  z.object({
    event: z.literal("stats"),
    hosts: z.record(
      z.string(),
      z.object({
        ok: z.number(),
        changed: z.number(),
        failures: z.number(),
        unreachable: z.number(),
        skipped: z.number(),
        rescued: z.number(),
        ignored: z.number(),
      }),
    ),
  }),
]);
export type CallbackEvent = z.infer<typeof CallbackEvent>;

/** One stdout line as an event, or null for anything else (which the runner logs). */
export function parseEvent(line: string): CallbackEvent | null {
  try {
    const parsed = CallbackEvent.safeParse(JSON.parse(line));
    return parsed.success ? parsed.data : null;
  } catch {
    return null;
  }
}
