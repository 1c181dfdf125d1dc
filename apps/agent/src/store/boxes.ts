import type { BoxEnv, GitAuthor } from "@doppio/contracts";
import type { BoxSecrets } from "../vmm/executor.ts";
import type { Db } from "./db.ts";

/** Everything the agent needs to rebuild a box's VmSpec (restart, reconcile) without the control plane. */
export interface BoxSpec {
  template: string;
  templateVersion: string;
  vcpu: number;
  memoryMb: number;
  diskGb: number;
  env: BoxEnv;
  owner: string;
  sitePublic: boolean;
  /** Anyone's request to the public site may wake it from hibernation (absent in records from before). */
  publicWake?: boolean;
  /** GitHub `owner/name` the guest clones on first start (absent in records from before). */
  repo?: string | null;
  /** GitHub's web origin for the box's Git credentials and clone (the payload's githubUrl); absent: github.com. */
  githubUrl?: string;
  /** The owner's git commit author (the payload's gitAuthor); null or absent: none. */
  gitAuthor?: GitAuthor | null;
  /** Stable for the box's life; replaced on reset (a new clone). */
  secrets: BoxSecrets;
}

export interface StoredBox {
  slug: string;
  desiredState: "running" | "stopped";
  spec: BoxSpec;
  ip: string;
  mac: string;
  tap: string | null;
  generation: number;
  updatedAt: string;
}

interface Row {
  slug: string;
  desired_state: "running" | "stopped";
  spec: string;
  ip: string;
  mac: string;
  tap: string | null;
  generation: number;
  updated_at: string;
}

const toBox = (r: Row): StoredBox => ({
  slug: r.slug,
  desiredState: r.desired_state,
  spec: JSON.parse(r.spec) as BoxSpec,
  ip: r.ip,
  mac: r.mac,
  tap: r.tap,
  generation: r.generation,
  updatedAt: r.updated_at,
});

/** The boxes this host is responsible for, with their desired state: what reconcile steers toward. */
export class BoxStore {
  constructor(
    private readonly db: Db,
    private readonly now: () => Date = () => new Date(),
  ) {}

  /**
   * Runs `fn`'s writes as one transaction: one commit, so one wait for the disk, where a
   * create records the box, its boot generation and its metadata token before it acts.
   */
  atomically<T>(fn: () => T): T {
    return this.db.transaction(fn)();
  }

  get(slug: string): StoredBox | null {
    const row = this.db.prepare("SELECT * FROM boxes WHERE slug = ?").get(slug) as Row | undefined;
    return row ? toBox(row) : null;
  }

  all(): StoredBox[] {
    return (this.db.prepare("SELECT * FROM boxes ORDER BY slug").all() as Row[]).map(toBox);
  }

  /** `createdByJob` is recorded only when the row is new; an update never changes it. */
  upsert(box: Omit<StoredBox, "updatedAt">, opts: { createdByJob?: string } = {}): void {
    this.db
      .prepare(
        `INSERT INTO boxes (slug, desired_state, spec, ip, mac, tap, generation, updated_at, created_by_job)
         VALUES (@slug, @desired, @spec, @ip, @mac, @tap, @generation, @at, @createdByJob)
         ON CONFLICT (slug) DO UPDATE SET desired_state = @desired, spec = @spec, ip = @ip, mac = @mac,
           tap = @tap, generation = @generation, updated_at = @at`,
      )
      .run({
        slug: box.slug,
        desired: box.desiredState,
        spec: JSON.stringify(box.spec),
        ip: box.ip,
        mac: box.mac,
        tap: box.tap,
        generation: box.generation,
        at: this.now().toISOString(),
        createdByJob: opts.createdByJob ?? null,
      });
  }

  /** The job whose create first recorded this box (null for rows older than the column). */
  createdByJob(slug: string): string | null {
    const row = this.db.prepare("SELECT created_by_job FROM boxes WHERE slug = ?").get(slug) as
      | { created_by_job: string | null }
      | undefined;
    return row?.created_by_job ?? null;
  }

  setDesired(slug: string, desired: "running" | "stopped"): void {
    this.db
      .prepare("UPDATE boxes SET desired_state = ?, updated_at = ? WHERE slug = ?")
      .run(desired, this.now().toISOString(), slug);
  }

  /** Sets who may wake the hibernated box; true when it changed. */
  setPublicWake(slug: string, publicWake: boolean): boolean {
    const box = this.get(slug);
    if (!box || (box.spec.publicWake ?? false) === publicWake) return false;
    this.db
      .prepare("UPDATE boxes SET spec = ?, updated_at = ? WHERE slug = ?")
      .run(JSON.stringify({ ...box.spec, publicWake }), this.now().toISOString(), slug);
    return true;
  }

  /** Next boot/restore generation (the guest re-applies its identity when it changes). */
  bumpGeneration(slug: string): number {
    const row = this.db
      .prepare(
        "UPDATE boxes SET generation = generation + 1, updated_at = ? WHERE slug = ? RETURNING generation",
      )
      .get(this.now().toISOString(), slug) as { generation: number } | undefined;
    return row?.generation ?? 1;
  }

  /** Records the sha256 of the box's new metadata-service token (the old one stops working). */
  setMetadataToken(slug: string, sha256: string): void {
    this.db.prepare("UPDATE boxes SET metadata_token_sha256 = ? WHERE slug = ?").run(sha256, slug);
  }

  /** The box a metadata-service token belongs to (by its sha256), or null. */
  byMetadataToken(sha256: string): { slug: string; ip: string } | null {
    const row = this.db.prepare("SELECT slug, ip FROM boxes WHERE metadata_token_sha256 = ?").get(sha256) as
      | { slug: string; ip: string }
      | undefined;
    return row ?? null;
  }

  remove(slug: string): boolean {
    return this.db.prepare("DELETE FROM boxes WHERE slug = ?").run(slug).changes === 1;
  }
}
