import { chmod, mkdir, readFile, rename, writeFile } from "node:fs/promises";
import path from "node:path";
import { z } from "zod";
import { CliError, usageError } from "./errors.ts";
import type { Settings } from "./settings.ts";

/** One control plane the CLI knows, with the personal API token it signed in with. */
const Context = z.object({
  url: z.string().url(),
  token: z.string().optional(),
  /** Id of the token on the server, so `logout` can revoke it. */
  tokenId: z.string().optional(),
  email: z.string().optional(),
});

const ConfigFile = z.object({
  current: z.string().nullable().default(null),
  contexts: z.record(z.string(), Context).default({}),
});
export type ConfigFile = z.infer<typeof ConfigFile>;

const CONTEXT_NAME_RE = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,62}$/;

function configPath(settings: Settings): string {
  return path.join(settings.configDir, "config.json");
}

export async function readConfig(settings: Settings): Promise<ConfigFile> {
  const file = configPath(settings);
  let text: string;
  try {
    text = await readFile(file, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return { current: null, contexts: {} };
    throw new CliError("failed", `cannot read ${file}`, "check the file's permissions", { cause: err });
  }
  try {
    return ConfigFile.parse(JSON.parse(text));
  } catch (err) {
    throw new CliError("failed", `${file} is not a valid doppio config`, "fix or delete the file", {
      cause: err,
    });
  }
}

/** Writes the config with mode 0600 (it holds tokens), atomically so a crash never truncates it. */
export async function writeConfig(settings: Settings, config: ConfigFile): Promise<void> {
  const file = configPath(settings);
  await mkdir(settings.configDir, { recursive: true, mode: 0o700 });
  const tmp = `${file}.${process.pid}.tmp`;
  await writeFile(tmp, `${JSON.stringify(config, null, 2)}\n`, { mode: 0o600 });
  await chmod(tmp, 0o600);
  await rename(tmp, file);
}

export function checkContextName(name: string): string {
  if (!CONTEXT_NAME_RE.test(name)) {
    throw usageError(
      `invalid context name "${name}"`,
      "use letters, digits, '.', '_', ':' or '-' (at most 63 characters)",
    );
  }
  return name;
}

/** A context name for a URL when the user gives none: its host, e.g. `boxes.example.com`. */
export function contextNameFor(url: string): string {
  const host = new URL(url).host.replace(/[^A-Za-z0-9._:-]/g, "-");
  return CONTEXT_NAME_RE.test(host) ? host : "default";
}

export function normalizeUrl(raw: string): string {
  let url: URL;
  try {
    url = new URL(/^[a-z]+:\/\//i.test(raw) ? raw : `https://${raw}`);
  } catch {
    throw usageError(
      `"${raw}" is not a URL`,
      "pass the control plane's address, e.g. https://boxes.example.com",
    );
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw usageError(`"${raw}" is not an http(s) URL`, "pass e.g. https://boxes.example.com");
  }
  return url.origin + url.pathname.replace(/\/+$/, "");
}

/** Where a command talks to: the environment overrides the selected context. */
export interface Target {
  url: string;
  token?: string;
  contextName: string | null;
}

export function resolveTarget(settings: Settings, config: ConfigFile, contextFlag?: string): Target {
  const name = contextFlag ?? settings.context ?? config.current;
  const ctx = name ? config.contexts[name] : undefined;
  if (name && !ctx && (contextFlag || settings.context)) {
    throw usageError(`no context named "${name}"`, "list them with: doppio context ls");
  }
  const url = settings.url ? normalizeUrl(settings.url) : ctx?.url;
  if (!url) {
    throw usageError(
      "no control plane configured",
      "run: doppio login --url https://boxes.example.com (or set DOPPIO_URL)",
    );
  }
  // A context's token is only ever sent to that context's own URL.
  const token = settings.token ?? (ctx && ctx.url === url ? ctx.token : undefined);
  return { url, token, contextName: ctx ? (name ?? null) : null };
}
