import type { AgentConfig } from "../config.ts";

/**
 * The box-isolation firewall (tap mode): two nftables tables the agent owns and rewrites
 * whole, atomically, in one `nft -f` transaction.
 *
 * - `bridge doppio`: a TAP may only send ARP and IPv4 frames carrying its own MAC and IP
 *   (the `ports` set: TAP . MAC . IP), so a box cannot borrow another box's address to
 *   pass the metadata service's caller check; frames between TAPs are dropped (the TAPs
 *   are also isolated bridge ports).
 * - `inet doppio`: box → host only to the metadata port on the gateway and the edge's
 *   ports (a box may open its own public URL), at most `BOX_TO_HOST_CONNECTIONS` open
 *   connections per box and new ones at `BOX_TO_HOST_RATE` (the host's services hold a
 *   descriptor per connection, and every box shares them); box → anything routed only to public
 *   addresses (no private, loopback, link-local/cloud-metadata, CGNAT or multicast
 *   ranges), masqueraded; nothing from outside opens a connection into a box; boxes' VMMs
 *   start no connection out of the host.
 */
export const FIREWALL_TABLE = "doppio";

/** Destinations a box never reaches through the host: private, link-local and reserved ranges. */
const BLOCKED_DESTINATIONS = [
  "0.0.0.0/8",
  "10.0.0.0/8",
  "100.64.0.0/10",
  "127.0.0.0/8",
  "169.254.0.0/16",
  "172.16.0.0/12",
  "192.0.0.0/24",
  "192.0.2.0/24",
  "192.168.0.0/16",
  "198.18.0.0/15",
  "224.0.0.0/3",
] as const;

/**
 * Per box, towards the host (metadata service, edge): connections open at once, and new
 * ones per second after a burst. More are reset at once; nothing of the host sees them.
 * The metadata service needs one per request (the credential helper runs curl each time)
 * plus a parked clone's long-poll; a page of the box's own URL a handful.
 */
export const BOX_TO_HOST_CONNECTIONS = 16;
export const BOX_TO_HOST_RATE = { perSecond: 20, burst: 40 } as const;

/** A range of uids, both ends included. */
export interface UidRange {
  first: number;
  last: number;
}

/** What a box's TAP may send as: the only source MAC and IP its frames may carry. */
export interface PortIdentity {
  tap: string;
  mac: string;
  ip: string;
}

export interface FirewallSpec {
  bridge: string;
  /** Box network, e.g. `10.0.0.0/16`. */
  cidr: string;
  gateway: string;
  tapPrefix: string;
  /** TCP ports on the gateway boxes may open (the metadata service). */
  gatewayPorts: readonly number[];
  /** TCP ports on any host address boxes may open (the edge: a box reaching its own URL). */
  hostPorts: readonly number[];
  /**
   * The uids boxes' VMMs run as (vmm/qemu/confine.ts): they start no connection out of the
   * host (a VMM's guest traffic goes through its TAP), so one that a guest escaped into
   * cannot reach other boxes or the networks beyond from the host's side. The host's own
   * addresses stay reachable (user mode's QEMU and socat talk over loopback), where every
   * service asks for a token or, like the metadata service, a box's own source address.
   */
  vmmUids?: UidRange;
  blocked?: readonly string[];
}

/** Quotes an interface name for nft (names are checked `[A-Za-z0-9_.-]{1,15}` upstream). */
const q = (name: string) => `"${name}"`;

function portElement(p: PortIdentity): string {
  return `${q(p.tap)} . ${p.mac} . ${p.ip}`;
}

function portSet(ports: readonly number[]): string {
  return `{ ${[...new Set(ports)].sort((a, b) => a - b).join(", ")} }`;
}

/**
 * The whole ruleset as one nft script. `table X {}` then `delete table X` makes the
 * replacement work whether or not the table exists, and nft applies the file as one
 * transaction: there is no moment without rules.
 */
export function firewallScript(spec: FirewallSpec, ports: readonly PortIdentity[]): string {
  const br = q(spec.bridge);
  const taps = q(`${spec.tapPrefix}*`);
  const blocked = (spec.blocked ?? BLOCKED_DESTINATIONS).join(", ");
  const elements = ports.length ? `elements = { ${ports.map(portElement).join(", ")} }` : "";
  const gatewayRule = spec.gatewayPorts.length
    ? `ip daddr ${spec.gateway} tcp dport ${portSet(spec.gatewayPorts)} accept`
    : "";
  const vmmRule = spec.vmmUids
    ? `meta skuid ${spec.vmmUids.first}-${spec.vmmUids.last} ct state new oifname != "lo" counter drop`
    : "";
  const hostRule = spec.hostPorts.length
    ? `ip daddr != 127.0.0.0/8 tcp dport ${portSet(spec.hostPorts)} fib daddr type local accept`
    : "";
  return `table bridge ${FIREWALL_TABLE} {}
delete table bridge ${FIREWALL_TABLE}
table bridge ${FIREWALL_TABLE} {
  set ports { type ifname . ether_addr . ipv4_addr; ${elements} }
  chain prerouting {
    type filter hook prerouting priority filter; policy accept;
    iifname ${taps} jump from_box
  }
  chain from_box {
    ether type arp iifname . arp saddr ether . arp saddr ip @ports accept
    ether type ip iifname . ether saddr . ip saddr @ports accept
    counter drop
  }
  chain forward {
    type filter hook forward priority filter; policy accept;
    iifname ${taps} oifname ${taps} counter drop
  }
}
table inet ${FIREWALL_TABLE} {}
delete table inet ${FIREWALL_TABLE}
table inet ${FIREWALL_TABLE} {
  set blocked { type ipv4_addr; flags interval; elements = { ${blocked} } }
  set box_conns { type ipv4_addr; flags dynamic; size 65535; }
  set box_rate { type ipv4_addr; flags dynamic,timeout; timeout 1m; size 65535; }
  chain input {
    type filter hook input priority filter; policy accept;
    iifname ${br} jump box_to_host
  }
  chain box_to_host {
    ct state established,related accept
    meta l4proto tcp ct state new add @box_conns { ip saddr ct count over ${BOX_TO_HOST_CONNECTIONS} } counter reject with tcp reset
    meta l4proto tcp ct state new update @box_rate { ip saddr limit rate over ${BOX_TO_HOST_RATE.perSecond}/second burst ${BOX_TO_HOST_RATE.burst} packets } counter reject with tcp reset
    ${gatewayRule}
    ${hostRule}
    counter drop
  }
  chain forward {
    type filter hook forward priority filter; policy accept;
    iifname ${br} jump box_out
    oifname ${br} ct state established,related accept
    oifname ${br} counter drop
  }
  chain box_out {
    oifname ${br} drop
    meta nfproto ipv6 drop
    ip saddr != ${spec.cidr} drop
    ip daddr @blocked counter drop
    accept
  }
  chain output {
    type filter hook output priority filter; policy accept;
    ${vmmRule}
  }
  chain postrouting {
    type nat hook postrouting priority srcnat; policy accept;
    ip saddr ${spec.cidr} ip daddr != ${spec.cidr} masquerade
  }
}
`;
}

export function addPortScript(p: PortIdentity): string {
  return `add element bridge ${FIREWALL_TABLE} ports { ${portElement(p)} }\n`;
}

export function deletePortsScript(ports: readonly PortIdentity[]): string {
  return ports.map((p) => `delete element bridge ${FIREWALL_TABLE} ports { ${portElement(p)} }\n`).join("");
}

export function removeTablesScript(): string {
  return `table bridge ${FIREWALL_TABLE} {}
delete table bridge ${FIREWALL_TABLE}
table inet ${FIREWALL_TABLE} {}
delete table inet ${FIREWALL_TABLE}
`;
}

/** The `ports` set's elements from `nft -j list set bridge doppio ports`. */
export function parsePortSet(json: string): PortIdentity[] {
  const doc = JSON.parse(json) as { nftables?: Array<{ set?: { elem?: unknown[] } }> };
  const elems = doc.nftables?.find((e) => e.set)?.set?.elem ?? [];
  const out: PortIdentity[] = [];
  for (const e of elems) {
    const concat = (e as { concat?: unknown[] }).concat;
    if (Array.isArray(concat) && concat.length === 3 && concat.every((c) => typeof c === "string")) {
      const [tap, mac, ip] = concat as [string, string, string];
      out.push({ tap, mac, ip });
    }
  }
  return out;
}

/**
 * Host ports boxes may open: the edge's listeners (so a box can load its own site and
 * code URLs through the host's address), never the agent's API or Caddy's admin.
 */
export function edgePorts(edge: AgentConfig["edge"]): number[] {
  if (!edge) return [];
  if (edge.tls.mode === "https") return [80, 443];
  const port = Number(/:(\d{1,5})$/.exec(edge.tls.listen)?.[1]);
  return Number.isInteger(port) && port > 0 ? [port] : [];
}
