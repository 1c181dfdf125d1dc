import { request } from "node:http";
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

/**
 * Where Caddy's admin API listens. Production uses a unix socket (`unix:/run/doppio/caddy-admin.sock`):
 * only root can connect to it, whatever a box or a local user can reach over TCP.
 * `http://127.0.0.1:PORT` stays possible for development.
 */
export type CaddyAdminAddress =
  | { kind: "unix"; socketPath: string; listen: string }
  | { kind: "tcp"; host: string; port: number; listen: string };

/** Parses `unix:/abs/path.sock` or `http://127.0.0.1:PORT`; null when it is neither. */
export function parseCaddyAdminAddress(address: string): CaddyAdminAddress | null {
  if (address.startsWith("unix:")) {
    const socketPath = address.slice("unix:".length);
    // Unix socket paths are limited to 107 bytes by the kernel.
    if (!socketPath.startsWith("/") || socketPath.length > 107 || /[\s,]/.test(socketPath)) return null;
    return { kind: "unix", socketPath, listen: `unix/${socketPath}` };
  }
  const m = /^http:\/\/(127\.0\.0\.1|localhost|\[::1\]):(\d{1,5})\/?$/.exec(address);
  const port = Number(m?.[2]);
  if (!m || port < 1 || port > 65535) return null;
  return { kind: "tcp", host: m[1]!.replace(/^\[|\]$/g, ""), port, listen: `${m[1]}:${port}` };
}

export class HttpCaddyAdmin implements CaddyAdmin {
  readonly #address: CaddyAdminAddress;
  readonly #timeoutMs: number;

  constructor(opts: { address: string; timeoutMs?: number }) {
    const parsed = parseCaddyAdminAddress(opts.address);
    if (!parsed) throw new EdgeError("caddy_unreachable", `not a Caddy admin address: ${opts.address}`);
    this.#address = parsed;
    this.#timeoutMs = opts.timeoutMs ?? 10_000;
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
    // Caddy restarts its admin listener on every config load, so the first attempt can meet
    // a listener that is going away. One retry on a transport error covers that; it is safe
    // for POST /load too, since Caddy ignores a load identical to the running config.
    for (let attempt = 1; ; attempt++) {
      let res: { status: number; text: string };
      try {
        res = await this.#send(method, path, body);
      } catch (err) {
        const timedOut = err instanceof Error && err.name === "TimeoutError";
        if (attempt < 2 && !timedOut) continue;
        throw new EdgeError("caddy_unreachable", "Caddy admin API is unreachable", {
          cause: err,
          details: { method, path, attempt },
        });
      }
      if (res.status < 200 || res.status > 299) {
        // Caddy answers errors as {"error": "..."}; keep its message for the log, not for users.
        throw new EdgeError("caddy_rejected", `Caddy admin ${method} ${path} answered ${res.status}`, {
          details: { status: res.status, body: res.text.slice(0, 500) },
        });
      }
      return res.text;
    }
  }

  #send(method: string, path: string, body?: string): Promise<{ status: number; text: string }> {
    const a = this.#address;
    return new Promise((resolve, reject) => {
      const req = request(
        {
          method,
          path,
          ...(a.kind === "unix"
            ? // Caddy accepts only an empty Host on its unix socket listener.
              { socketPath: a.socketPath, setHost: false }
            : { host: a.host, port: a.port }),
          headers: {
            ...(a.kind === "unix" ? { host: "" } : {}),
            ...(body === undefined ? {} : { "content-type": "application/json" }),
          },
          signal: AbortSignal.timeout(this.#timeoutMs),
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (c: Buffer) => chunks.push(c));
          res.on("end", () =>
            resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString("utf8") }),
          );
          res.on("error", reject);
        },
      );
      req.on("error", (err) =>
        reject(err.name === "AbortError" ? Object.assign(err, { name: "TimeoutError" }) : err),
      );
      req.end(body);
    });
  }
}
