import type { Upstream } from "../vmm/executor.ts";

/** What the edge needs to know about one box on this host. The agent core keeps it current. */
export interface BoxRoute {
  /** hibernated: its memory is saved on this host; an allowed request wakes it (decide.ts). */
  state: "running" | "stopped" | "hibernated";
  /** Where a guest port is reachable from the host (`host:port`), or null if it is not. */
  upstream: Upstream;
  /** User id of the box's owner: only they pass for code-server, dev ports and a private site. */
  owner: string;
  sitePublic: boolean;
  /** Whether anyone's request to its public site may wake it from hibernation (else only the owner's). */
  publicWake?: boolean;
}

/** Read side used on every request; must be cheap (an in-memory map, not a DB query). */
export interface RouteTable {
  get(slug: string): BoxRoute | undefined;
}

/**
 * The default table: a Map the agent core writes on create/start/stop/delete. Changing it
 * never touches Caddy's config, which is the point (see caddy-config.ts).
 */
export class MemoryRouteTable implements RouteTable {
  readonly #routes = new Map<string, BoxRoute>();

  get(slug: string): BoxRoute | undefined {
    return this.#routes.get(slug);
  }

  set(slug: string, route: BoxRoute): void {
    this.#routes.set(slug, route);
  }

  delete(slug: string): boolean {
    return this.#routes.delete(slug);
  }

  slugs(): string[] {
    return [...this.#routes.keys()];
  }
}
