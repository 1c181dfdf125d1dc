import { homedir } from "node:os";
import path from "node:path";
import { z } from "zod";

/** The environment the CLI reads, parsed once at start; nothing else reads process.env. */
const EnvSchema = z.object({
  XDG_CONFIG_HOME: z.string().min(1).optional(),
  HOME: z.string().min(1).optional(),
  DOPPIO_URL: z.string().min(1).optional(),
  DOPPIO_TOKEN: z.string().min(1).optional(),
  DOPPIO_CONTEXT: z.string().min(1).optional(),
  DISPLAY: z.string().min(1).optional(),
  WAYLAND_DISPLAY: z.string().min(1).optional(),
  /** Fallback poll interval while waiting for a job (the event stream is the fast path). */
  DOPPIO_POLL_MS: z.coerce.number().int().min(100).max(60_000).default(3_000),
});

export interface Settings {
  configDir: string;
  url?: string;
  token?: string;
  context?: string;
  hasDisplay: boolean;
  pollMs: number;
}

export function loadSettings(env: NodeJS.ProcessEnv): Settings {
  // Empty strings mean "unset" for every variable here, as shells often export VAR= to clear.
  const present = Object.fromEntries(Object.entries(env).filter(([, v]) => v !== undefined && v !== ""));
  const e = EnvSchema.parse(present);
  const base = e.XDG_CONFIG_HOME ?? path.join(e.HOME ?? homedir(), ".config");
  return {
    configDir: path.join(base, "doppio"),
    url: e.DOPPIO_URL,
    token: e.DOPPIO_TOKEN,
    context: e.DOPPIO_CONTEXT,
    hasDisplay: Boolean(e.DISPLAY || e.WAYLAND_DISPLAY),
    pollMs: e.DOPPIO_POLL_MS,
  };
}
