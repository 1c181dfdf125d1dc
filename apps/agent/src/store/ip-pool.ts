import { numToIp, type PoolLayout, poolSize } from "../cidr.ts";
import { AgentError } from "../errors.ts";
import type { Db } from "./db.ts";

/**
 * Box addresses: the whole CIDR minus network, gateway, broadcast and the reserved golden
 * address. `ip` is the primary key and `slug` unique, so two boxes can never share an
 * address and one box never holds two. better-sqlite3 is synchronous, so the scan for the
 * lowest free address and the insert are one atomic transaction.
 */
export class IpPool {
  constructor(
    private readonly db: Db,
    readonly layout: PoolLayout,
    private readonly now: () => Date = () => new Date(),
  ) {}

  /** Same slug → same address, however often it is called. */
  allocate(slug: string): string {
    return this.db.transaction(() => {
      const existing = this.get(slug);
      if (existing) return existing;
      const used = new Set(
        (
          this.db
            .prepare("SELECT ip_num FROM ip_allocations WHERE ip_num BETWEEN ? AND ?")
            .all(this.layout.first, this.layout.last) as Array<{ ip_num: number }>
        ).map((r) => r.ip_num),
      );
      for (let n = this.layout.first; n <= this.layout.last; n++) {
        if (used.has(n)) continue;
        const ip = numToIp(n);
        this.db
          .prepare("INSERT INTO ip_allocations (ip, ip_num, slug, allocated_at) VALUES (?, ?, ?, ?)")
          .run(ip, n, slug, this.now().toISOString());
        return ip;
      }
      throw new AgentError(
        "ip_pool_exhausted",
        `no free address in ${this.layout.cidr}: all ${poolSize(this.layout)} box addresses are allocated`,
        { details: { cidr: this.layout.cidr, size: poolSize(this.layout) } },
      );
    })();
  }

  get(slug: string): string | null {
    const row = this.db.prepare("SELECT ip FROM ip_allocations WHERE slug = ?").get(slug) as
      | { ip: string }
      | undefined;
    return row?.ip ?? null;
  }

  free(slug: string): boolean {
    return this.db.prepare("DELETE FROM ip_allocations WHERE slug = ?").run(slug).changes === 1;
  }

  /**
   * Hands `from`'s address to `to` (a claimed parked clone becomes a box: its TAP, MAC and
   * firewall element derive from the address, so none of them change). False if `from`
   * holds none. Call it inside the claim's transaction.
   */
  rename(from: string, to: string): boolean {
    return this.db.prepare("UPDATE ip_allocations SET slug = ? WHERE slug = ?").run(to, from).changes === 1;
  }

  all(): Array<{ ip: string; slug: string }> {
    return this.db.prepare("SELECT ip, slug FROM ip_allocations ORDER BY ip_num").all() as Array<{
      ip: string;
      slug: string;
    }>;
  }

  gateway(): string {
    return numToIp(this.layout.gateway);
  }

  golden(): string {
    return numToIp(this.layout.golden);
  }
}
