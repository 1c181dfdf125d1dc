import type { Logger } from "pino";
import type { CaddyAdmin } from "./caddy-admin.ts";
import { canonicalJson } from "./caddy-config.ts";

export type EnsureResult = "unchanged" | "loaded";

/**
 * Keeps Caddy on the agent's one static config. Loads only when the running config differs
 * (Caddy restarted empty, or someone changed it), because every load drops every proxied
 * WebSocket on the host. Cheap to call often: one GET /config/.
 */
export class EdgeConfigKeeper {
  readonly #admin: CaddyAdmin;
  readonly #desired: unknown;
  readonly #desiredJson: string;
  readonly #log: Logger | undefined;
  #inflight: Promise<EnsureResult> | null = null;
  #timer: NodeJS.Timeout | null = null;

  constructor(admin: CaddyAdmin, desired: unknown, log?: Logger) {
    this.#admin = admin;
    this.#desired = desired;
    this.#desiredJson = canonicalJson(desired);
    this.#log = log;
  }

  /** Concurrent callers share one check, so two ticks can never load twice. */
  ensureConfig(): Promise<EnsureResult> {
    this.#inflight ??= this.#ensure().finally(() => {
      this.#inflight = null;
    });
    return this.#inflight;
  }

  /** Re-check every `intervalMs` (Caddy restarts are otherwise invisible to the agent). */
  watch(intervalMs: number): void {
    this.stop();
    this.#timer = setInterval(() => {
      this.ensureConfig().catch((err: unknown) => this.#log?.warn({ err }, "edge config check failed"));
    }, intervalMs);
    this.#timer.unref();
  }

  stop(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = null;
  }

  async #ensure(): Promise<EnsureResult> {
    const started = Date.now();
    const current = await this.#admin.getConfig();
    if (canonicalJson(current) === this.#desiredJson) return "unchanged";
    await this.#admin.load(this.#desired);
    this.#log?.info(
      { ms: Date.now() - started, wasEmpty: current === null },
      "edge config loaded into caddy",
    );
    return "loaded";
  }
}
