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
  /** Warm-pool clones of the template ready to claim there, as its agent last reported (absent: 0). */
  poolReady?: number;
}

export type PlacementResult = { ok: true; server: Candidate } | { ok: false; reasons: string[] };

/**
 * Picks an active server with a fresh heartbeat, room for `need`, and a ready golden
 * snapshot of the template (or, for the default template only, a server that can cold-boot
 * it). Among those it prefers a ready golden, then a ready warm-pool clone (a create there
 * skips the restore), then the most headroom, so boxes spread across hosts.
 */
export function placeBox(
  candidates: readonly Candidate[],
  need: Resources,
  opts: { now: Date; heartbeatFreshMs: number; allowColdBoot: boolean },
): PlacementResult {
  const reasons = new Set<string>();
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
  const fits = candidates.filter((s) => {
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
  const ranked = [...fits].sort(
    (a, b) =>
      Number(b.golden === "ready") - Number(a.golden === "ready") ||
      Number((b.poolReady ?? 0) > 0) - Number((a.poolReady ?? 0) > 0) ||
      headroom(b) - headroom(a) ||
      a.name.localeCompare(b.name),
  );
  return { ok: true, server: ranked[0]! };
}
