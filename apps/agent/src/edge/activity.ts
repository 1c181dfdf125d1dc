import { inNetns, run } from "../net/command.ts";
import type { RouteTable } from "./routes.ts";

/**
 * When each box on this host was last used, as the edge sees it: every request it passes
 * (the forward-auth check, WebSocket upgrades included) and, sampled, every TCP connection
 * still open to the box's upstream (an open WebSocket sends no new requests, but its
 * connection from Caddy to the guest stays established). In memory: after an agent restart
 * the control plane keeps the last time it was told.
 */
export class BoxActivity {
  readonly #last = new Map<string, number>();

  constructor(private readonly now: () => number) {}

  touch(slug: string, at: number = this.now()): void {
    if ((this.#last.get(slug) ?? 0) < at) this.#last.set(slug, at);
  }

  /** Epoch ms of the box's last activity, or null if none was seen since the agent started. */
  lastActiveAt(slug: string): number | null {
    return this.#last.get(slug) ?? null;
  }

  forget(slug: string): void {
    this.#last.delete(slug);
  }
}

/** Guest ports whose upstream connections count as use in user-mode networking (loopback forwards). */
const FORWARDED_PORTS = [8000, 8888, 9000];

/**
 * Marks running boxes that have an established connection to their upstream as active now.
 * `peers` are `ip:port` of the far ends of established TCP connections where Caddy runs.
 * A box on a TAP is matched by its address (any port: dev ports too); a user-mode box by
 * its forwarded loopback ports.
 */
export function touchConnected(
  slugs: Iterable<string>,
  routes: RouteTable,
  peers: ReadonlySet<string>,
  activity: BoxActivity,
): string[] {
  const peerIps = new Set([...peers].map((p) => p.slice(0, p.lastIndexOf(":"))));
  const touched: string[] = [];
  for (const slug of slugs) {
    const route = routes.get(slug);
    if (route?.state !== "running") continue;
    const upstreams = FORWARDED_PORTS.flatMap((p) => route.upstream(p) ?? []);
    const first = upstreams[0];
    if (!first) continue;
    const ip = first.slice(0, first.lastIndexOf(":"));
    const hit = ip.startsWith("127.") ? upstreams.some((u) => peers.has(u)) : peerIps.has(ip);
    if (hit) {
      activity.touch(slug);
      touched.push(slug);
    }
  }
  return touched;
}

/** Far ends (`ip:port`) of the established TCP connections in `netns` (or the agent's namespace). */
export async function establishedPeers(netns: string | null): Promise<Set<string>> {
  const [file, args] = inNetns(netns, "ss", ["-Htn", "state", "established"]);
  const out = await run(file, args, { timeoutMs: 10_000 });
  const peers = new Set<string>();
  for (const line of out.split("\n")) {
    // Recv-Q Send-Q Local:Port Peer:Port (state column omitted when filtered by state)
    const cols = line.trim().split(/\s+/);
    const peer = cols[3];
    if (peer) peers.add(peer.replace(/^\[::ffff:(.*)\]/, "$1"));
  }
  return peers;
}
