import type { Db } from "../store/db.ts";
import type { IpPool } from "../store/ip-pool.ts";

type ParkedState = "filling" | "ready" | "claimed" | "retiring";

/** One clone of the warm pool: restored from the golden under a pool slug, belonging to no box. */
export interface ParkedVm {
  slug: string;
  template: string;
  diskGb: number;
  state: ParkedState;
  ip: string | null;
  generation: number;
  /** The box it is being handed to (state `claimed`). */
  box: string | null;
  createdAt: string;
}

interface Row {
  slug: string;
  template: string;
  disk_gb: number;
  state: ParkedState;
  ip: string | null;
  generation: number;
  box: string | null;
  created_at: string;
}

const toParked = (r: Row): ParkedVm => ({
  slug: r.slug,
  template: r.template,
  diskGb: r.disk_gb,
  state: r.state,
  ip: r.ip,
  generation: r.generation,
  box: r.box,
  createdAt: r.created_at,
});

/**
 * The warm pool's records in the agent's SQLite (`parked_vms`). A claim is one transaction
 * that moves the oldest `ready` clone of the template and disk size to `claimed` for one
 * box and hands its address to that box; better-sqlite3 is synchronous, so two creates can
 * never take the same clone.
 */
export class ParkedStore {
  constructor(
    private readonly db: Db,
    private readonly ipPool: IpPool,
    private readonly now: () => Date = () => new Date(),
  ) {}

  all(): ParkedVm[] {
    return (this.db.prepare("SELECT * FROM parked_vms ORDER BY created_at, slug").all() as Row[]).map(
      toParked,
    );
  }

  get(slug: string): ParkedVm | null {
    const row = this.db.prepare("SELECT * FROM parked_vms WHERE slug = ?").get(slug) as Row | undefined;
    return row ? toParked(row) : null;
  }

  /** A new clone being made: its address is taken in the same transaction. */
  insertFilling(p: { slug: string; template: string; diskGb: number; generation: number }): string {
    return this.db.transaction(() => {
      const ip = this.ipPool.allocate(p.slug);
      this.db
        .prepare(
          `INSERT INTO parked_vms (slug, template, disk_gb, state, ip, generation, created_at)
           VALUES (?, ?, ?, 'filling', ?, ?, ?)`,
        )
        .run(p.slug, p.template, p.diskGb, ip, p.generation, this.now().toISOString());
      return ip;
    })();
  }

  /** The sha256 of the clone's metadata-service bearer (its parked identity's token). */
  setToken(slug: string, sha256: string): void {
    this.db.prepare("UPDATE parked_vms SET token_sha256 = ? WHERE slug = ?").run(sha256, slug);
  }

  markReady(slug: string): boolean {
    return (
      this.db.prepare("UPDATE parked_vms SET state = 'ready' WHERE slug = ? AND state = 'filling'").run(slug)
        .changes === 1
    );
  }

  /**
   * Takes the oldest ready clone of `template` with a `diskGb` data volume for box `box`, and
   * moves its address to the box; null when none is ready. Atomic: a clone is claimed once.
   */
  claim(template: string, diskGb: number, box: string): ParkedVm | null {
    return this.db.transaction(() => {
      const row = this.db
        .prepare(
          `UPDATE parked_vms SET state = 'claimed', box = ?, claimed_at = ?
           WHERE slug = (SELECT slug FROM parked_vms WHERE state = 'ready' AND template = ? AND disk_gb = ?
                         ORDER BY created_at, slug LIMIT 1)
           RETURNING *`,
        )
        .get(box, this.now().toISOString(), template, diskGb) as Row | undefined;
      if (!row) return null;
      if (!this.ipPool.rename(row.slug, box)) throw new Error(`parked clone ${row.slug} holds no address`);
      return toParked(row);
    })();
  }

  /**
   * One surplus ready clone of `template`, now `retiring` (no claim takes it); null when the
   * pool holds no more than it should. Surplus: clones whose data volume is not `diskGb`
   * (the pool's size changed), then, past `target` ready and filling clones, the newest
   * ready one. Atomic with claims: a clone is either claimed or retired, never both, and a
   * claimed or filling clone is never retired.
   */
  takeSurplus(template: string, diskGb: number, target: number): ParkedVm | null {
    return this.db.transaction(() => {
      const { n } = this.db
        .prepare(
          `SELECT count(*) AS n FROM parked_vms
           WHERE template = ? AND disk_gb = ? AND state IN ('ready', 'filling')`,
        )
        .get(template, diskGb) as { n: number };
      const row = this.db
        .prepare(
          `UPDATE parked_vms SET state = 'retiring'
           WHERE slug = (SELECT slug FROM parked_vms WHERE state = 'ready' AND template = ?
                           AND (disk_gb <> ? OR ? > ?)
                         ORDER BY disk_gb = ?, created_at DESC, slug DESC LIMIT 1)
           RETURNING *`,
        )
        .get(template, diskGb, n, target, diskGb) as Row | undefined;
      return row ? toParked(row) : null;
    })();
  }

  /** The clone being handed to `box` (a create retried after a restart continues it). */
  claimedFor(box: string): ParkedVm | null {
    const row = this.db.prepare("SELECT * FROM parked_vms WHERE state = 'claimed' AND box = ?").get(box) as
      | Row
      | undefined;
    return row ? toParked(row) : null;
  }

  /** The clone a metadata-service bearer belongs to (by its sha256), or null. */
  byToken(sha256: string): ParkedVm | null {
    const row = this.db.prepare("SELECT * FROM parked_vms WHERE token_sha256 = ?").get(sha256) as
      | Row
      | undefined;
    return row ? toParked(row) : null;
  }

  /** Forgets the clone (handed over, or discarded); its address is freed unless a box holds it now. */
  remove(slug: string): void {
    this.db.transaction(() => {
      this.db.prepare("DELETE FROM parked_vms WHERE slug = ?").run(slug);
      this.ipPool.free(slug);
    })();
  }

  counts(): Map<string, { ready: number; filling: number }> {
    const out = new Map<string, { ready: number; filling: number }>();
    for (const p of this.all()) {
      const c = out.get(p.template) ?? { ready: 0, filling: 0 };
      if (p.state === "ready") c.ready++;
      if (p.state === "filling") c.filling++;
      out.set(p.template, c);
    }
    return out;
  }
}
