/**
 * At most `limit` events per key in any `windowMs` (a sliding window of timestamps, at most
 * `limit` kept per key). Pure: the caller passes the time.
 */
export class RateWindow {
  private readonly hits = new Map<string, number[]>();

  constructor(
    readonly limit: number,
    readonly windowMs: number,
  ) {}

  /** Records an event for `key` at `now` and returns 0, or returns the ms until one is allowed. */
  take(key: string, now: number): number {
    const recent = (this.hits.get(key) ?? []).filter((t) => t > now - this.windowMs);
    if (recent.length >= this.limit) {
      this.hits.set(key, recent);
      return recent[0]! + this.windowMs - now;
    }
    recent.push(now);
    this.hits.set(key, recent);
    return 0;
  }
}
