import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TestNetns } from "../support/netns.ts";

/**
 * TCP listeners inside test-owned namespaces (busybox httpd), standing in for the host's
 * services, another network's hosts and a cloud's metadata address. Stopped by PID.
 */
export class Listeners {
  readonly #procs: ChildProcess[] = [];
  readonly #root = mkdtempSync(join(tmpdir(), "dbx-listen-"));

  constructor() {
    writeFileSync(join(this.#root, "index.html"), "reached\n");
  }

  /** Listens on `addr:port` inside `ns` (`0.0.0.0` for every address of it). */
  async listen(ns: TestNetns, addr: string, port: number): Promise<void> {
    const p = spawn(
      "ip",
      ["netns", "exec", ns.name, "busybox", "httpd", "-f", "-p", `${addr}:${port}`, "-h", this.#root],
      {
        stdio: "ignore",
      },
    );
    this.#procs.push(p);
    const probe = addr === "0.0.0.0" ? "127.0.0.1" : addr;
    for (let i = 0; i < 100; i++) {
      try {
        ns.exec("busybox", ["nc", "-w", "1", probe, String(port)], 3000);
        return;
      } catch {
        await new Promise((r) => setTimeout(r, 50));
      }
    }
    throw new Error(`listener ${addr}:${port} in ${ns.name} did not come up`);
  }

  stop(): void {
    for (const p of this.#procs) if (p.pid) process.kill(p.pid, "SIGTERM");
    rmSync(this.#root, { recursive: true, force: true });
  }
}

/**
 * A second namespace ("the world") joined to `host` by a veth pair: `host` gets
 * 198.51.100.1/24 and a default route through it; the world answers on public-looking,
 * private and link-local addresses of its own, as a cloud network
 * would. Every address lives only inside these test namespaces.
 */
export function joinWorld(host: TestNetns, world: TestNetns, worldAddrs: readonly string[]): void {
  const run = (ns: TestNetns, args: string[]) => ns.exec("ip", args);
  execFileSync("ip", [
    "-n",
    host.name,
    "link",
    "add",
    "up0",
    "type",
    "veth",
    "peer",
    "name",
    "up1",
    "netns",
    world.name,
  ]);
  run(host, ["addr", "add", "198.51.100.1/24", "dev", "up0"]);
  run(host, ["link", "set", "up0", "up"]);
  run(host, ["route", "add", "default", "via", "198.51.100.2"]);
  run(world, ["addr", "add", "198.51.100.2/24", "dev", "up1"]);
  run(world, ["link", "set", "up1", "up"]);
  // On the world's loopback device: its addresses are local there (no dummy module needed).
  for (const a of worldAddrs) run(world, ["addr", "add", `${a}/32`, "dev", "lo"]);
}

/** Asks a minimal-image guest's probe hook which endpoints it can open (`IP:PORT` → open). */
export function probeFrom(
  host: TestNetns,
  guestHttp: string,
  targets: readonly string[],
  forge: { as?: string; mac?: string } = {},
): Record<string, "open" | "closed"> {
  const q = [`to=${targets.join(",")}`];
  if (forge.as) q.push(`as=${forge.as}`);
  if (forge.mac) q.push(`mac=${forge.mac}`);
  const out = host.curl(`http://${guestHttp}/cgi-bin/probe?${q.join("&")}`);
  const result: Record<string, "open" | "closed"> = {};
  for (const line of out.trim().split("\n")) {
    const [target, verdict] = line.split(" ");
    if (target && (verdict === "open" || verdict === "closed")) result[target] = verdict;
  }
  return result;
}
