import path from "node:path";
import { fileURLToPath } from "node:url";

/** Where `make up` keeps its state and which loopback ports it uses (override with env). */
export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
export const DATA = path.resolve(ROOT, process.env.DOPPIO_UP_DATA ?? ".data/up");
export const PIDS = path.join(DATA, "pids.json");
/** Caddy's admin API: a unix socket only root can open (no box or local user reaches it). */
export const CADDY_ADMIN = `unix:${path.join(DATA, "caddy-admin.sock")}`;

export const PORTS = {
  api: Number(process.env.DOPPIO_UP_API_PORT ?? 8080),
  edge: Number(process.env.DOPPIO_UP_EDGE_PORT ?? 8088),
  agent: Number(process.env.DOPPIO_UP_AGENT_PORT ?? 8090),
  /** Guests' metadata service (Git credentials), on loopback: QEMU user mode maps the gateway there. */
  metadata: Number(process.env.DOPPIO_UP_METADATA_PORT ?? 8169),
};

/** `*.localhost` resolves to loopback in browsers, so box URLs open on this machine. */
export const DOMAIN = "localhost";
export const API_URL = `http://localhost:${PORTS.api}`;
export const DASHBOARD_URL = `${API_URL}/dashboard/`;
export const ADMIN_EMAIL = "admin@doppiobox.localhost";
export const SERVER_NAME = "local";
/**
 * Disk the registered server offers boxes (each reserves its size's disk, 10 GB for a small
 * one; overlays are sparse). Used when `make up` registers server `local`.
 */
export const DISK_GB = Number(process.env.DOPPIO_UP_DISK_GB ?? 50);
