import type { Db } from "./db.ts";

/**
 * What the edge must remember across agent restarts (times in seconds since the epoch):
 *  - spent hand-off tokens by `jti` until their `exp`, so a leaked sign-in link works once
 *    even if the agent restarts within its minute;
 *  - signed-out control-plane sessions by `sid` until every cookie issued for them has
 *    expired, so a restart does not reopen them before the next heartbeat.
 * Each call prunes what has expired, so both tables stay as small as their lifetimes allow.
 */
export class EdgeAccessStore {
  constructor(private readonly db: Db) {}

  /** Marks a hand-off token spent; false if it already was (one atomic insert). */
  spend(jti: string, exp: number, nowSec: number): boolean {
    return this.db.transaction(() => {
      this.db.prepare("DELETE FROM edge_spent_handoffs WHERE exp <= ?").run(nowSec);
      return (
        this.db
          .prepare("INSERT INTO edge_spent_handoffs (jti, exp) VALUES (?, ?) ON CONFLICT (jti) DO NOTHING")
          .run(jti, exp).changes === 1
      );
    })();
  }

  /**
   * Records signed-out sessions. `until` is kept from the first report: no cookie for the
   * session can be issued after the agent knows it ended, so none outlives that plus its TTL.
   */
  endSessions(sids: readonly string[], until: number): void {
    const insert = this.db.prepare(
      "INSERT INTO edge_ended_sessions (sid, until) VALUES (?, ?) ON CONFLICT (sid) DO NOTHING",
    );
    this.db.transaction(() => {
      for (const sid of sids) insert.run(sid, until);
    })();
  }

  /** Signed-out sessions whose cookies may still be alive at `nowSec`. */
  endedSessions(nowSec: number): string[] {
    this.db.prepare("DELETE FROM edge_ended_sessions WHERE until <= ?").run(nowSec);
    return (this.db.prepare("SELECT sid FROM edge_ended_sessions").all() as Array<{ sid: string }>).map(
      (r) => r.sid,
    );
  }

  /** Rows kept, for tests and metrics: pruning must keep this bounded. */
  counts(): { spent: number; ended: number } {
    const n = (table: string) =>
      (this.db.prepare(`SELECT count(*) AS n FROM ${table}`).get() as { n: number }).n;
    return { spent: n("edge_spent_handoffs"), ended: n("edge_ended_sessions") };
  }
}
