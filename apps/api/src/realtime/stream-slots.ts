import { AppError } from "../errors.ts";

/**
 * Open event and log streams per user. Each holds a connection and a send buffer, so one
 * user (or a leaked token) must not be able to hold an unbounded number of them.
 */
export class StreamSlots {
  private readonly open = new Map<string, number>();

  constructor(private readonly perUser: number) {}

  /** Takes a slot for `userId` or throws 429; the returned release gives it back once. */
  acquire(userId: string): () => void {
    const held = this.open.get(userId) ?? 0;
    if (held >= this.perUser) {
      throw new AppError(
        "rate_limited",
        `too many open streams (at most ${this.perUser} per user); close another tab or follower`,
        { limit: this.perUser },
      );
    }
    this.open.set(userId, held + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = (this.open.get(userId) ?? 1) - 1;
      if (left > 0) this.open.set(userId, left);
      else this.open.delete(userId);
    };
  }
}
