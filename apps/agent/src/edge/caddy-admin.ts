import { EdgeError } from "./errors.ts";

/** The slice of Caddy's admin API the agent uses. An interface so the core can be tested without Caddy. */
export interface CaddyAdmin {
  /** Replace the whole running config (POST /load). */
  load(config: unknown): Promise<void>;
  /** The running config (GET /config/); null when Caddy runs empty. */
  getConfig(): Promise<unknown>;
  /** True when the admin API answers. */
  healthy(): Promise<boolean>;
}

export interface CaddyAdminOptions {
  /** e.g. http://127.0.0.1:2019 */
  baseUrl: string;
  timeoutMs?: number;
  fetch?: typeof fetch;
}

export class HttpCaddyAdmin implements CaddyAdmin {
  readonly #base: string;
  readonly #timeoutMs: number;
  readonly #fetch: typeof fetch;

  constructor(opts: CaddyAdminOptions) {
    this.#base = opts.baseUrl.replace(/\/+$/, "");
    this.#timeoutMs = opts.timeoutMs ?? 10_000;
    this.#fetch = opts.fetch ?? fetch;
  }

  async load(config: unknown): Promise<void> {
    await this.#call("POST", "/load", JSON.stringify(config));
  }

  async getConfig(): Promise<unknown> {
    const text = await this.#call("GET", "/config/");
    try {
      return JSON.parse(text) as unknown;
    } catch (err) {
      throw new EdgeError("caddy_bad_response", "Caddy returned a config that is not JSON", {
        cause: err,
        details: { body: text.slice(0, 200) },
      });
    }
  }

  async healthy(): Promise<boolean> {
    try {
      await this.#call("GET", "/config/");
      return true;
    } catch (err) {
      if (err instanceof EdgeError) return false;
      throw err;
    }
  }

  async #call(method: string, path: string, body?: string): Promise<string> {
    let res: Response | null = null;
    // Caddy restarts its admin listener on every config load, so a pooled keep-alive
    // connection can be dead on the next call. One retry on a transport error covers that;
    // it is safe for POST /load too, since Caddy ignores a load identical to the running config.
    for (let attempt = 1; !res; attempt++) {
      try {
        res = await this.#fetch(`${this.#base}${path}`, {
          method,
          ...(body === undefined ? {} : { body, headers: { "content-type": "application/json" } }),
          signal: AbortSignal.timeout(this.#timeoutMs),
        });
      } catch (err) {
        if (attempt < 2 && !(err instanceof DOMException && err.name === "TimeoutError")) continue;
        throw new EdgeError("caddy_unreachable", "Caddy admin API is unreachable", {
          cause: err,
          details: { method, path, attempt },
        });
      }
    }
    const text = await res.text().catch(() => "");
    if (!res.ok) {
      // Caddy answers errors as {"error": "..."}; keep its message for the log, not for users.
      throw new EdgeError("caddy_rejected", `Caddy admin ${method} ${path} answered ${res.status}`, {
        details: { status: res.status, body: text.slice(0, 500) },
      });
    }
    return text;
  }
}
