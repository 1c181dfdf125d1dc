export interface Resources {
  vcpu: number;
  memoryMb: number;
  diskGb: number;
}

export interface Candidate {
  id: string;
  name: string;
  status: string;
  lastHeartbeatAt: Date | null;
  capacity: Resources;
  used: Resources;
  /** Golden status of the requested template on this server. */
  golden: "missing" | "building" | "ready" | "stale" | "failed" | null;
  /** The server's warm pools, every template's (absent: none). */
  pools?: readonly PoolOnServer[];
}

/** One template's warm pool on a server, as its agent last reported it. */
export interface PoolOnServer {
  template: string;
  /** The size the agent aims at, and clones ready to claim or being made. */
  target: number;
  ready: number;
  filling: number;
  /** What one clone takes there: its data volume and its guest memory. */
  diskGb: number;
  memoryMb: number;
}

/**
 * What a server's warm pools hold: each pool at the larger of its size and the clones it
 * has (a pool fills up to its size, and a lowered one still holds its surplus until it is
 * retired), each clone its own data volume and guest memory. No vCPU: a parked guest idles.
 */
export function poolReservation(pools: readonly PoolOnServer[]): Resources {
  const r = { vcpu: 0, memoryMb: 0, diskGb: 0 };
  for (const p of pools) {
    const clones = Math.max(p.target, p.ready + p.filling);
    r.memoryMb += clones * p.memoryMb;
    r.diskGb += clones * p.diskGb;
  }
  return r;
}

/** Whether a create of `template` with a `diskGb` data volume would claim a clone there. */
function hasReadyClone(s: Candidate, template: string, diskGb: number): boolean {
  return (s.pools ?? []).some((p) => p.template === template && p.diskGb === diskGb && p.ready > 0);
}

/**
 * The best server, and `others`: the rest that fit and are as good but for headroom (the
 * same golden and warm-pool standing), best first: where a create goes when another create
 * is placing on the best one right now. None of them would cold-boot the box where the best
 * restores it, or restore it where the best has a clone ready.
 */
export type PlacementResult<C extends Candidate = Candidate> =
  | { ok: true; server: C; others: C[] }
  | { ok: false; reasons: string[] };

/**
 * Picks an active server with a fresh heartbeat, room for `need` beside its boxes and its
 * warm pools, and a ready golden snapshot of the template (or, for the default template
 * only, a server that can cold-boot it). Among those it prefers a ready golden, then a ready
 * warm-pool clone of the template with the box's data-volume size (a create there skips the
 * restore; a clone of another size cannot be claimed), then the most headroom, so boxes
 * spread across hosts.
 */
export function placeBox<C extends Candidate>(
  candidates: readonly C[],
  need: Resources,
  opts: { now: Date; heartbeatFreshMs: number; allowColdBoot: boolean; template?: string },
): PlacementResult<C> {
  const reasons = new Set<string>();
  const withPools = candidates.map((s) => {
    const held = poolReservation(s.pools ?? []);
    return {
      ...s,
      used: {
        vcpu: s.used.vcpu + held.vcpu,
        memoryMb: s.used.memoryMb + held.memoryMb,
        diskGb: s.used.diskGb + held.diskGb,
      },
    };
  });
  const rejection = (s: Candidate): string | null => {
    if (s.status !== "active") return "not active";
    if (!s.lastHeartbeatAt || opts.now.getTime() - s.lastHeartbeatAt.getTime() > opts.heartbeatFreshMs) {
      return "agent not heard from recently";
    }
    for (const key of ["vcpu", "memoryMb", "diskGb"] as const) {
      if (s.capacity[key] - s.used[key] < need[key]) return `not enough ${key}`;
    }
    if (s.golden !== "ready" && !opts.allowColdBoot) return "template not ready";
    return null;
  };
  const fits = withPools.filter((s) => {
    const why = rejection(s);
    if (why) reasons.add(`${s.name}: ${why}`);
    return why === null;
  });
  if (fits.length === 0) {
    if (candidates.length === 0) reasons.add("no servers registered");
    return { ok: false, reasons: [...reasons] };
  }
  const headroom = (s: Candidate) =>
    Math.min(
      ...(["vcpu", "memoryMb", "diskGb"] as const).map(
        (key) => (s.capacity[key] - s.used[key] - need[key]) / s.capacity[key],
      ),
    );
  const pooled = (s: Candidate) =>
    opts.template !== undefined && hasReadyClone(s, opts.template, need.diskGb);
  const ranked = [...fits].sort(
    (a, b) =>
      Number(b.golden === "ready") - Number(a.golden === "ready") ||
      Number(pooled(b)) - Number(pooled(a)) ||
      headroom(b) - headroom(a) ||
      a.name.localeCompare(b.name),
  );
  const original = (s: C) => candidates.find((c) => c.id === s.id) ?? s;
  const best = ranked[0]!;
  const asGood = (s: Candidate) =>
    (s.golden === "ready") === (best.golden === "ready") && pooled(s) === pooled(best);
  return { ok: true, server: original(best), others: ranked.slice(1).filter(asGood).map(original) };
}
