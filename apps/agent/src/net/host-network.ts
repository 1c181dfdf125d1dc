import type { Logger } from "pino";
import { cidrProblem, numToIp, poolLayout } from "../cidr.ts";
import type { AgentConfig } from "../config.ts";
import type { GuestAddress, HostNetwork } from "../vmm/executor.ts";
import { CommandError, inNetns, run } from "./command.ts";
import { NetworkError } from "./errors.ts";
import {
  addPortScript,
  deletePortsScript,
  edgePorts,
  FIREWALL_TABLE,
  firewallScript,
  type PortIdentity,
  parsePortSet,
  removeTablesScript,
  type UidRange,
} from "./firewall.ts";
import { isValidIfName, macForIp, TAP_PREFIX } from "./naming.ts";

export interface LinuxHostNetworkConfig {
  /** Bridge device every TAP is attached to, e.g. `br-devbox`. */
  bridge: string;
  /** Box network, e.g. `10.0.0.0/16`; the bridge gets its first host address as gateway. */
  cidr: string;
  /** Run every command inside this network namespace (tests, local stack). */
  netns?: string | null;
  tapPrefix?: string;
  /** TCP ports on the gateway boxes may open (the metadata service). */
  gatewayPorts?: readonly number[];
  /** TCP ports on any host address boxes may open (the edge). */
  hostPorts?: readonly number[];
  /** The uids boxes' VMMs run as, which the firewall keeps off the network (`FirewallSpec.vmmUids`). */
  vmmUids?: UidRange;
  log?: Logger;
}

interface IpLink {
  ifname: string;
  master?: string;
  flags?: string[];
}
interface IpAddr {
  addr_info?: Array<{ family: string; local: string; prefixlen: number }>;
}

/**
 * Host side of the VM network with iproute2 and nftables (spec page 05 §2): a bridge with
 * the gateway address, the box-isolation firewall with its NAT (`firewall.ts`), and one
 * isolated TAP per VM that may send only as its box. Every method checks before it changes
 * anything, so repeating a call is harmless; the firewall is rewritten whole by
 * `ensureBridge`, which the agent calls at start and on every reconcile.
 */
export class LinuxHostNetwork implements HostNetwork {
  readonly bridge: string;
  readonly netns: string | null;
  readonly gateway: string;
  readonly prefix: number;
  readonly cidr: string;
  readonly #tapPrefix: string;
  readonly #gatewayPorts: readonly number[];
  readonly #hostPorts: readonly number[];
  readonly #vmmUids: UidRange | undefined;
  readonly #log: Logger | undefined;
  /** Each TAP's identity, as the firewall's `ports` set must hold it. */
  #ports: Map<string, PortIdentity> | null = null;
  /** nft changes run one at a time, so a whole-table rewrite never drops a port added meanwhile. */
  #nftQueue: Promise<unknown> = Promise.resolve();

  constructor(config: LinuxHostNetworkConfig) {
    if (!isValidIfName(config.bridge))
      throw new NetworkError("invalid_config", `bad bridge name ${config.bridge}`);
    const problem = cidrProblem(config.cidr);
    if (problem) throw new NetworkError("invalid_config", `bad CIDR ${config.cidr}: ${problem}`);
    const layout = poolLayout(config.cidr);
    this.bridge = config.bridge;
    this.netns = config.netns ?? null;
    this.prefix = layout.prefix;
    this.cidr = layout.cidr;
    this.gateway = numToIp(layout.gateway);
    this.#tapPrefix = config.tapPrefix ?? TAP_PREFIX;
    this.#gatewayPorts = config.gatewayPorts ?? [];
    this.#hostPorts = config.hostPorts ?? [];
    this.#vmmUids = config.vmmUids;
    this.#log = config.log;
  }

  /** One at a time (agent start, reconcile and tests may call it together), after pending nft changes. */
  ensureBridge(): Promise<void> {
    return this.#nft(() => this.#ensureBridge());
  }

  async #ensureBridge(): Promise<void> {
    if (!(await this.#linkExists(this.bridge))) {
      await this.#tolerate(this.#ip(["link", "add", "name", this.bridge, "type", "bridge"]), "File exists");
      this.#log?.info({ bridge: this.bridge, netns: this.netns }, "bridge created");
    }
    const addrs = JSON.parse(await this.#ip(["-j", "addr", "show", "dev", this.bridge])) as IpAddr[];
    const has = addrs.some((a) =>
      (a.addr_info ?? []).some(
        (i) => i.family === "inet" && i.local === this.gateway && i.prefixlen === this.prefix,
      ),
    );
    if (!has) {
      // Another process (an earlier agent, an operator) may add it at the same moment.
      await this.#tolerate(
        this.#ip(["addr", "add", `${this.gateway}/${this.prefix}`, "dev", this.bridge]),
        /File exists|Address already assigned/,
      );
    }
    // A bridge whose address nobody set takes the lowest of its ports' (the TAPs' random
    // host-side MACs), so every box started or removed could change the gateway's MAC under
    // every guest: their frames to the old one were lost until their ARP entry expired, and
    // a pool clone's identity poll waited up to ~30 s (bench:pool, captured on the bridge).
    // Set once, it stays.
    await this.#ip(["link", "set", "dev", this.bridge, "address", macForIp(this.gateway), "up"]);
    await this.#exec("sysctl", ["-q", "-w", "net.ipv4.ip_forward=1"]);
    // After an agent restart the kernel still holds the running boxes' entries: keep
    // those whose TAP still exists, so their traffic never stops. Later entries come and
    // go with createTap/removeTap (a TAP being made right now may not exist yet).
    if (!this.#ports) {
      const taps = new Set(await this.listTaps());
      this.#ports = new Map((await this.#listPorts()).filter((p) => taps.has(p.tap)).map((p) => [p.tap, p]));
    }
    await this.#nftScript(
      firewallScript(
        {
          bridge: this.bridge,
          cidr: this.cidr,
          gateway: this.gateway,
          tapPrefix: this.#tapPrefix,
          gatewayPorts: this.#gatewayPorts,
          hostPorts: this.#hostPorts,
          ...(this.#vmmUids ? { vmmUids: this.#vmmUids } : {}),
        },
        [...this.#ports.values()],
      ),
    );
  }

  async createTap(tap: string, guest: GuestAddress): Promise<void> {
    this.#checkTap(tap);
    const port: PortIdentity = { tap, mac: guest.mac.toLowerCase(), ip: guest.ip };
    // One nft and one ip run, side by side: every spawn here is on the create path. The
    // guest starts only after both, and frames from a TAP not in the set are dropped anyway.
    await Promise.all([this.#allowPort(port), this.#attachTap(tap)]);
  }

  /** The TAP's one permitted source identity in the firewall's `ports` set. */
  #allowPort(port: PortIdentity): Promise<void> {
    return this.#nft(async () => {
      const ports = await this.#portsMap();
      const old = ports.get(port.tap);
      const stale = old && (old.mac !== port.mac || old.ip !== port.ip) ? deletePortsScript([old]) : "";
      await this.#nftScript(stale + addPortScript(port));
      ports.set(port.tap, port);
    });
  }

  /** Creates the TAP, enslaves it and isolates the port: an isolated port forwards only to the bridge itself, never to another box's TAP. */
  async #attachTap(tap: string): Promise<void> {
    const attach = [
      `link set dev ${tap} master ${this.bridge} up`,
      `link set dev ${tap} type bridge_slave isolated on`,
    ];
    try {
      await this.#ip(["-batch", "-"], [`tuntap add dev ${tap} mode tap`, ...attach]);
    } catch (err) {
      // The TAP is left from an earlier run of this job (a TAP that exists is "busy").
      if (!/File exists|Device or resource busy/.test(stderrOf(err))) throw err;
      await this.#ip(["-batch", "-"], attach);
    }
  }

  async removeTap(tap: string): Promise<void> {
    this.#checkTap(tap);
    try {
      await this.#ip(["link", "del", "dev", tap]);
    } catch (err) {
      if (!isGone(err)) throw err;
      this.#log?.debug({ tap }, "tap already gone");
    }
    await this.#nft(async () => {
      const ports = await this.#portsMap();
      const old = ports.get(tap);
      if (!old) return;
      await this.#tolerate(this.#nftScript(deletePortsScript([old])), "No such file or directory");
      ports.delete(tap);
    });
  }

  /** Removes the firewall, every TAP and the bridge: nothing of the box network is left. */
  async teardown(): Promise<void> {
    for (const tap of await this.listTaps()) await this.removeTap(tap);
    await this.#nft(async () => {
      await this.#nftScript(removeTablesScript());
      this.#ports = new Map();
    });
    if (await this.#linkExists(this.bridge)) await this.#ip(["link", "del", "dev", this.bridge]);
    this.#log?.info({ bridge: this.bridge, netns: this.netns }, "box network removed");
  }

  async listTaps(): Promise<string[]> {
    const links = JSON.parse(await this.#ip(["-j", "link", "show"])) as IpLink[];
    return links.map((l) => l.ifname).filter((n) => n.startsWith(this.#tapPrefix) && n !== this.bridge);
  }

  /** The TAP's bridge, or null when it is not attached (tests and reconcile look at this). */
  async tapMaster(tap: string): Promise<string | null> {
    const links = JSON.parse(await this.#ip(["-j", "link", "show", "dev", tap])) as IpLink[];
    return links[0]?.master ?? null;
  }

  #checkTap(tap: string): void {
    if (!isValidIfName(tap) || !tap.startsWith(this.#tapPrefix)) {
      throw new NetworkError(
        "invalid_config",
        `TAP name ${tap} must start with ${this.#tapPrefix} and fit 15 characters`,
      );
    }
  }

  async #linkExists(name: string): Promise<boolean> {
    try {
      await this.#ip(["link", "show", "dev", name]);
      return true;
    } catch (err) {
      if (isGone(err)) return false;
      throw err;
    }
  }

  async #tolerate(p: Promise<unknown>, message: string | RegExp): Promise<void> {
    try {
      await p;
    } catch (err) {
      const stderr = stderrOf(err);
      if (typeof message === "string" ? !stderr.includes(message) : !message.test(stderr)) throw err;
    }
  }

  async #portsMap(): Promise<Map<string, PortIdentity>> {
    this.#ports ??= new Map((await this.#listPorts()).map((p) => [p.tap, p]));
    return this.#ports;
  }

  /** The firewall's `ports` set as the kernel holds it (empty before the first install). */
  async #listPorts(): Promise<PortIdentity[]> {
    try {
      return parsePortSet(await this.#exec("nft", ["-j", "list", "set", "bridge", FIREWALL_TABLE, "ports"]));
    } catch (err) {
      if (err instanceof NetworkError && err.cause instanceof CommandError) return [];
      throw err;
    }
  }

  #nft<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.#nftQueue.then(fn, fn);
    this.#nftQueue = next.catch(() => undefined);
    return next;
  }

  #nftScript(script: string): Promise<string> {
    return this.#exec("nft", ["-f", "-"], script);
  }

  #ip(args: string[], lines?: string[]): Promise<string> {
    return this.#wrap(
      "ip",
      this.netns ? ["-n", this.netns, ...args] : args,
      lines && `${lines.join("\n")}\n`,
    );
  }

  #exec(file: string, args: string[], input?: string): Promise<string> {
    const [f, a] = inNetns(this.netns, file, args);
    return this.#wrap(f, a, input);
  }

  async #wrap(file: string, args: string[], input?: string): Promise<string> {
    try {
      return await run(file, args, { timeoutMs: 20_000, ...(input === undefined ? {} : { input }) });
    } catch (err) {
      throw new NetworkError("command_failed", err instanceof Error ? err.message : String(err), {
        cause: err,
      });
    }
  }
}

function stderrOf(err: unknown): string {
  return err instanceof NetworkError && err.cause instanceof CommandError ? err.cause.stderr : "";
}

function isGone(err: unknown): boolean {
  return /does not exist|Cannot find device|No such device/.test(stderrOf(err));
}

/**
 * The tap-mode host network an agent's config describes: boxes may reach the metadata
 * service and the edge; their VMMs (running as `vmmUids`) nothing beyond the host.
 */
export function hostNetworkFor(
  config: AgentConfig,
  netns: string | null,
  log: Logger,
  vmmUids: UidRange,
): LinuxHostNetwork {
  return new LinuxHostNetwork({
    vmmUids,
    bridge: config.bridge.name,
    cidr: config.bridge.cidr,
    netns,
    gatewayPorts: config.metadata.enabled ? [config.metadata.port] : [],
    hostPorts: edgePorts(config.edge),
    log,
  });
}
