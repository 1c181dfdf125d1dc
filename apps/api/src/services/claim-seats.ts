/** A server's turn to claim on this replica (ClaimSeats.take). */
export interface ClaimSeat {
  /** Aborted when a newer long-poll of the same server takes the seat. */
  readonly superseded: AbortSignal;
  /**
   * Resolves once the server's earlier long-polls on this replica have finished, or at once
   * when this one is superseded while it waits (it then claims nothing).
   */
  readonly turn: Promise<void>;
  /** Gives the seat up (call once, when the long-poll ends). */
  leave(): void;
}

/**
 * One long-poll per server at a time on this replica. A server's agent holds one poll; a
 * second one means the first was left behind (its connection died on a cut link) or the
 * host misbehaves. Either way the newer poll wins: the older one is answered with no jobs,
 * and the newer one claims only after every older one's statement has finished. So one
 * host never holds more than one of the claim lane's connections, however many polls it
 * opens, and a poll whose agent is gone is not left to take jobs it cannot deliver.
 */
export class ClaimSeats {
  readonly #latest = new Map<string, { stop: AbortController; done: Promise<unknown> }>();

  take(serverId: string): ClaimSeat {
    const previous = this.#latest.get(serverId);
    previous?.stop.abort();
    const stop = new AbortController();
    let finish!: () => void;
    const finished = new Promise<void>((resolve) => (finish = resolve));
    // Done when this poll and every one before it are: a poll superseded while it waited
    // leaves at once, and the next one still waits for the statement it waited for.
    const seat = { stop, done: previous ? Promise.all([previous.done, finished]) : finished };
    this.#latest.set(serverId, seat);
    return {
      superseded: stop.signal,
      turn: previous ? Promise.race([previous.done.then(() => {}), aborted(stop.signal)]) : Promise.resolve(),
      leave: () => {
        finish();
        if (this.#latest.get(serverId) === seat) this.#latest.delete(serverId);
      },
    };
  }
}

function aborted(signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => signal.addEventListener("abort", () => resolve(), { once: true }));
}
