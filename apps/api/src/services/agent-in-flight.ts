import { AGENT_MAX_IN_FLIGHT } from "@doppio/contracts";

/**
 * How many of a server's agent requests this replica is handling at once, claims aside
 * (services/claim-seats.ts holds those to one per server). A host may have at most
 * AGENT_MAX_IN_FLIGHT (the agent opens no more connections than that besides its claim's);
 * a request over that is refused at once, so a flooding host (a stolen agent token, a broken
 * agent) holds at most that many of the replica's handlers and database connections, and
 * every other host's and user's requests still get their turn beside it.
 */
export class AgentInFlight {
  readonly #counts = new Map<string, number>();

  constructor(readonly limit = AGENT_MAX_IN_FLIGHT) {}

  /** Counts a request of `serverId` in, or returns false when it already has `limit`. */
  enter(serverId: string): boolean {
    const n = this.#counts.get(serverId) ?? 0;
    if (n >= this.limit) return false;
    this.#counts.set(serverId, n + 1);
    return true;
  }

  /** Counts one of its requests out (once per `enter` that returned true). */
  leave(serverId: string): void {
    const n = (this.#counts.get(serverId) ?? 1) - 1;
    if (n > 0) this.#counts.set(serverId, n);
    else this.#counts.delete(serverId);
  }

  /** Requests of `serverId` in handlers now. */
  count(serverId: string): number {
    return this.#counts.get(serverId) ?? 0;
  }
}
