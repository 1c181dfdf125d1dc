import type { Logger } from "pino";
import type { HostNetwork } from "../vmm/executor.ts";
import { CommandError, inNetns, run } from "./command.ts";
import { NetworkError } from "./errors.ts";
import { ipToNum, numToIp } from "./ipv4.ts";
import { isValidIfName, TAP_PREFIX } from "./naming.ts";

export interface LinuxHostNetworkConfig {
  /** Bridge device every TAP is attached to, e.g. `br-devbox`. */
  bridge: string;
  /** Box network, e.g. `10.0.0.0/16`; the bridge gets its first host address as gateway. */
  cidr: string;
  /** Run every command inside this network namespace (tests, local stack). */
  netns?: string | null;
  tapPrefix?: string;
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
 * Host side of the VM network with iproute2 and iptables (spec page 05 §2): a bridge with
 * the gateway address, one host-wide MASQUERADE rule for the box CIDR, and one TAP per VM.
 * Every method checks before it changes anything, so repeating a call is harmless.
 */
export class LinuxHostNetwork implements HostNetwork {
  readonly bridge: string;
  readonly netns: string | null;
  readonly gateway: string;
  readonly prefix: number;
  readonly cidr: string;
  readonly #tapPrefix: string;
  readonly #log: Logger | undefined;

  constructor(config: LinuxHostNetworkConfig) {
    if (!isValidIfName(config.bridge))
      throw new NetworkError("invalid_config", `bad bridge name ${config.bridge}`);
    const m = /^(\d{1,3}(?:\.\d{1,3}){3})\/(\d{1,2})$/.exec(config.cidr);
    const prefix = Number(m?.[2]);
    if (!m || prefix < 8 || prefix > 30) throw new NetworkError("invalid_config", `bad CIDR ${config.cidr}`);
    const size = 2 ** (32 - prefix);
    const network = Math.floor(ipToNum(m[1]!) / size) * size;
    this.bridge = config.bridge;
    this.netns = config.netns ?? null;
    this.prefix = prefix;
    this.cidr = `${numToIp(network)}/${prefix}`;
    this.gateway = numToIp(network + 1);
    this.#tapPrefix = config.tapPrefix ?? TAP_PREFIX;
    this.#log = config.log;
  }

  async ensureBridge(): Promise<void> {
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
      await this.#tolerate(
        this.#ip(["addr", "add", `${this.gateway}/${this.prefix}`, "dev", this.bridge]),
        "File exists",
      );
    }
    await this.#ip(["link", "set", "dev", this.bridge, "up"]);
    await this.#exec("sysctl", ["-q", "-w", "net.ipv4.ip_forward=1"]);
    const rule = ["POSTROUTING", "-s", this.cidr, "!", "-d", this.cidr, "-j", "MASQUERADE"];
    try {
      await this.#exec("iptables", ["-w", "5", "-t", "nat", "-C", ...rule]);
    } catch (err) {
      if (!(err instanceof NetworkError && err.cause instanceof CommandError && err.cause.exitCode === 1))
        throw err;
      await this.#exec("iptables", ["-w", "5", "-t", "nat", "-A", ...rule]);
      this.#log?.info({ cidr: this.cidr, netns: this.netns }, "masquerade rule added");
    }
  }

  async createTap(tap: string): Promise<void> {
    this.#checkTap(tap);
    if (!(await this.#linkExists(tap))) {
      await this.#tolerate(this.#ip(["tuntap", "add", "dev", tap, "mode", "tap"]), "File exists");
    }
    // One `ip` run for both: every spawn here is on the create path.
    await this.#ip(["link", "set", "dev", tap, "master", this.bridge, "up"]);
  }

  async removeTap(tap: string): Promise<void> {
    this.#checkTap(tap);
    try {
      await this.#ip(["link", "del", "dev", tap]);
    } catch (err) {
      if (isGone(err)) {
        this.#log?.debug({ tap }, "tap already gone");
        return;
      }
      throw err;
    }
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

  async #tolerate(p: Promise<unknown>, message: string): Promise<void> {
    try {
      await p;
    } catch (err) {
      if (
        err instanceof NetworkError &&
        err.cause instanceof CommandError &&
        err.cause.stderr.includes(message)
      )
        return;
      throw err;
    }
  }

  #ip(args: string[]): Promise<string> {
    return this.#wrap("ip", this.netns ? ["-n", this.netns, ...args] : args);
  }

  #exec(file: string, args: string[]): Promise<string> {
    const [f, a] = inNetns(this.netns, file, args);
    return this.#wrap(f, a);
  }

  async #wrap(file: string, args: string[]): Promise<string> {
    try {
      return await run(file, args, { timeoutMs: 20_000 });
    } catch (err) {
      throw new NetworkError("command_failed", err instanceof Error ? err.message : String(err), err);
    }
  }
}

function isGone(err: unknown): boolean {
  const stderr = err instanceof NetworkError && err.cause instanceof CommandError ? err.cause.stderr : "";
  return /does not exist|Cannot find device|No such device/.test(stderr);
}
