import { slugProblem } from "./slug.ts";

/**
 * The four public URL shapes of a box (ARCHITECTURE.md, "Edge routing"):
 *   {slug}.site.{domain}          → guest :8000 (and /socket.io/* → :9000)
 *   {slug}.code.{domain}          → guest :8888 (code-server)
 *   {port}-{slug}.code.{domain}   → guest {port}
 * Slugs start with a letter, so a leading run of digits and a hyphen always means a port.
 */
export type BoxHost =
  | { kind: "site"; slug: string }
  | { kind: "code"; slug: string }
  | { kind: "dev"; slug: string; port: number };

export const SITE_PORT = 8000;
export const SOCKETIO_PORT = 9000;
export const CODE_PORT = 8888;

const DEV_LABEL = /^([0-9]{1,5})-(.+)$/;

/** Parse a Host header (port and trailing dot tolerated, case-insensitive); null if it is not a box URL. */
export function parseBoxHost(host: string, domain: string): BoxHost | null {
  const name = stripPort(host.trim().toLowerCase()).replace(/\.$/, "");
  const d = domain.toLowerCase();
  for (const zone of ["site", "code"] as const) {
    const suffix = `.${zone}.${d}`;
    if (!name.endsWith(suffix)) continue;
    const label = name.slice(0, -suffix.length);
    if (label.includes(".")) return null;
    const dev = zone === "code" ? DEV_LABEL.exec(label) : null;
    if (dev) {
      const port = Number(dev[1]);
      const slug = dev[2]!;
      if (port < 1 || port > 65535 || dev[1]!.startsWith("0") || slugProblem(slug)) return null;
      return { kind: "dev", slug, port };
    }
    if (slugProblem(label)) return null;
    return zone === "site" ? { kind: "site", slug: label } : { kind: "code", slug: label };
  }
  return null;
}

/** Which guest port a request goes to. */
export function guestPort(host: BoxHost, path: string): number {
  if (host.kind === "site") return isSocketIo(path) ? SOCKETIO_PORT : SITE_PORT;
  if (host.kind === "code") return CODE_PORT;
  return host.port;
}

export function isSocketIo(path: string): boolean {
  return path === "/socket.io" || path.startsWith("/socket.io/");
}

export function siteHost(slug: string, domain: string): string {
  return `${slug}.site.${domain}`;
}

export function codeHost(slug: string, domain: string): string {
  return `${slug}.code.${domain}`;
}

export function devHost(slug: string, port: number, domain: string): string {
  return `${port}-${slug}.code.${domain}`;
}

function stripPort(host: string): string {
  if (host.startsWith("[")) return host; // IPv6 literal: never a box host
  const i = host.lastIndexOf(":");
  return i === -1 ? host : host.slice(0, i);
}
