import { ApiClient } from "./api.ts";
import { type ConfigFile, readConfig, resolveTarget, type Target, writeConfig } from "./config.ts";
import { CliError } from "./errors.ts";
import type { Io } from "./io.ts";

export interface GlobalOptions {
  context?: string;
  debug?: boolean;
}

/** What every command handler gets: the edges, the config and a client for the chosen target. */
export class App {
  private configCache: ConfigFile | null = null;

  constructor(
    readonly io: Io,
    readonly globals: () => GlobalOptions,
  ) {}

  async config(): Promise<ConfigFile> {
    this.configCache ??= await readConfig(this.io.settings);
    return this.configCache;
  }

  async saveConfig(config: ConfigFile): Promise<void> {
    await writeConfig(this.io.settings, config);
    this.configCache = config;
  }

  async target(): Promise<Target> {
    return resolveTarget(this.io.settings, await this.config(), this.globals().context);
  }

  /** A client that carries the token; fails before any request when there is none. */
  async api(): Promise<ApiClient> {
    const target = await this.target();
    if (!target.token) {
      throw new CliError(
        "failed",
        `not signed in to ${target.url}`,
        "run: doppio login (or set DOPPIO_TOKEN to a personal API token)",
      );
    }
    return new ApiClient(target.url, target.token);
  }
}
