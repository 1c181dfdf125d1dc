import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { existsSync, mkdirSync, openSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createConnection, createServer, type Server } from "node:net";
import path from "node:path";

/**
 * A real Debian host for the provisioning tests: `systemd-nspawn --boot` of an mmdebstrap
 * rootfs in a network namespace this test creates, reached over a veth pair. sshd and
 * systemd run inside; apt goes through an apt-cacher-ng bound to the veth's host address
 * (no NAT, no default route in the namespace). nspawn needs CAP_NET_ADMIN, /dev/net/tun and
 * a writable /proc/sys/net (SYSTEMD_NSPAWN_API_VFS_WRITABLE=network) for the agent's bridge.
 */

export const REPO = path.resolve(import.meta.dirname, "../../../../..");
export const ANSIBLE_DIR = path.join(REPO, "provision/ansible");
const CACHE = path.join(REPO, ".data/provision");

/** What the rootfs holds; part of its cache key. */
const ROOTFS_INCLUDE = "systemd,systemd-sysv,openssh-server,python3,python3-apt,sudo,dbus,iproute2";
const ROOTFS_RECIPE = "rootfs-recipe 1 bookworm minbase";
const SOURCES = "/etc/apt/sources.list.d/debian.sources";

const TOOLS: [string, string][] = [
  ["systemd-nspawn", "systemd-container"],
  ["mmdebstrap", "mmdebstrap"],
  ["/usr/sbin/apt-cacher-ng", "apt-cacher-ng"],
  ["ansible-playbook", "ansible"],
  ["ssh", "openssh-client"],
];

function which(cmd: string): boolean {
  if (cmd.startsWith("/")) return existsSync(cmd);
  try {
    execFileSync("sh", ["-c", `command -v ${cmd}`], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}

/** Why the test host cannot exist here, or null. CI runs as root with bootstrap.sh's packages. */
export function testHostUnavailable(): string | null {
  if (process.getuid?.() !== 0) return "needs root (netns, veth, systemd-nspawn); CI runs as root";
  const missing = TOOLS.filter(([cmd]) => !which(cmd)).map(([, pkg]) => pkg);
  if (missing.length)
    return `missing Debian packages ${missing.join(", ")} (scripts/bootstrap.sh installs them)`;
  return null;
}

/** Why ansible-playbook/ansible-lint cannot run here, or null. */
export function ansibleUnavailable(): string | null {
  const missing = [
    ["ansible-playbook", "ansible"],
    ["ansible-lint", "ansible-lint"],
  ]
    .filter(([cmd]) => !which(cmd!))
    .map(([, pkg]) => pkg);
  return missing.length
    ? `missing Debian packages ${missing.join(", ")} (scripts/bootstrap.sh installs them)`
    : null;
}

/** The cached rootfs for these inputs, built once (per cache) with mmdebstrap. */
function ensureRootfs(): string {
  const sources = readFileSync(SOURCES, "utf8");
  const key = createHash("sha256")
    .update(`${ROOTFS_RECIPE}\n${ROOTFS_INCLUDE}\n${sources}`)
    .digest("hex")
    .slice(0, 16);
  const dir = path.join(CACHE, `rootfs-${key}`);
  if (existsSync(path.join(dir, ".complete"))) return dir;
  mkdirSync(CACHE, { recursive: true });
  const tmp = `${dir}.tmp-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  // Sources on stdin: without them mmdebstrap picks an unreachable default mirror.
  execFileSync(
    "mmdebstrap",
    ["--variant=minbase", `--include=${ROOTFS_INCLUDE}`, "--mode=root", "bookworm", tmp, "-"],
    { input: sources, stdio: ["pipe", "ignore", "pipe"], timeout: 300_000 },
  );
  writeFileSync(path.join(tmp, ".complete"), `${key}\n`);
  rmSync(dir, { recursive: true, force: true });
  execFileSync("mv", [tmp, dir]);
  return dir;
}

export interface TestHost {
  name: string;
  /** The container's address on the veth (ssh target). */
  ip: string;
  /** The host end of the veth: apt-cacher-ng and the test's control-plane proxy listen here. */
  hostIp: string;
  runDir: string;
  sshKey: string;
  knownHosts: string;
  inventory: string;
  /** Runs a command in the container over SSH; stdout. */
  ssh(command: string, timeoutMs?: number): string;
  /** Forwards `hostIp:port` to a loopback service (the test's control plane), until stop(). */
  forward(targetPort: number): Promise<number>;
  stop(): Promise<void>;
}

/** A /30 in 172.31.240.0/20 that no route of this machine uses yet. */
function freeSubnet(): { hostIp: string; ip: string } {
  const routes = execFileSync("ip", ["-4", "route", "show", "table", "all"], { encoding: "utf8" });
  for (let i = 0; i < 64; i++) {
    const n = 240 * 256 + (Math.floor(Math.random() * 16 * 64) % (16 * 64)) * 4;
    const base = `172.31.${Math.floor(n / 256)}.${n % 256}`;
    if (routes.includes(`${base}/30`)) continue;
    return {
      hostIp: `172.31.${Math.floor(n / 256)}.${(n % 256) + 1}`,
      ip: `172.31.${Math.floor(n / 256)}.${(n % 256) + 2}`,
    };
  }
  throw new Error("no free /30 in 172.31.240.0/20");
}

async function waitUntil(
  what: string,
  check: () => boolean | Promise<boolean>,
  timeoutMs: number,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      if (await check()) return;
    } catch {
      // not yet
    }
    if (Date.now() > deadline) throw new Error(`${what} did not happen within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function stopProcess(child: ChildProcess | null, signal: NodeJS.Signals, timeoutMs: number) {
  const pid = child?.pid;
  if (!pid || !alive(pid) || child.exitCode !== null) return;
  process.kill(pid, signal);
  const deadline = Date.now() + timeoutMs;
  while (alive(pid) && child.exitCode === null && Date.now() < deadline)
    await new Promise((r) => setTimeout(r, 100));
  if (alive(pid) && child.exitCode === null) process.kill(pid, "SIGKILL");
}

/** Boots a fresh copy of the cached rootfs and waits for SSH. */
export async function startTestHost(): Promise<TestHost> {
  const rootfs = ensureRootfs();
  const id = randomBytes(3).toString("hex");
  const name = `dpxh-${id}`;
  const runDir = path.join(CACHE, "run", name);
  const root = path.join(runDir, "root");
  mkdirSync(runDir, { recursive: true });
  const undo: (() => Promise<void> | void)[] = [() => rmSync(runDir, { recursive: true, force: true })];
  let container: ChildProcess | null = null;
  let acng: ChildProcess | null = null;
  const servers: Server[] = [];
  const stop = async () => {
    const errors: unknown[] = [];
    for (const step of undo.splice(0).reverse()) {
      try {
        await step();
      } catch (err) {
        errors.push(err);
      }
    }
    if (errors.length) throw new AggregateError(errors, "test host teardown failed");
  };
  try {
    execFileSync("cp", ["-a", "--reflink=auto", rootfs, root]);
    const { hostIp, ip } = freeSubnet();

    // Network: a namespace and a veth pair; the container owns the namespace's end.
    execFileSync("ip", ["netns", "add", name]);
    undo.push(() => {
      execFileSync("ip", ["netns", "del", name]);
    });
    const hostIf = `vh${id}`;
    execFileSync("ip", ["link", "add", hostIf, "type", "veth", "peer", "name", "host0", "netns", name]);
    undo.push(() => {
      if (existsSync(`/sys/class/net/${hostIf}`)) execFileSync("ip", ["link", "del", hostIf]);
    });
    execFileSync("ip", ["addr", "add", `${hostIp}/30`, "dev", hostIf]);
    execFileSync("ip", ["link", "set", hostIf, "up"]);
    execFileSync("ip", ["-n", name, "link", "set", "lo", "up"]);
    execFileSync("ip", ["-n", name, "addr", "add", `${ip}/30`, "dev", "host0"]);
    execFileSync("ip", ["-n", name, "link", "set", "host0", "up"]);

    // apt inside the container: our own apt-cacher-ng on the veth's host address.
    const acngPort = 3142;
    const acngConf = path.join(runDir, "acng");
    mkdirSync(acngConf, { recursive: true });
    const acngCache = path.join(CACHE, "apt-cache");
    mkdirSync(acngCache, { recursive: true });
    writeFileSync(
      path.join(acngConf, "acng.conf"),
      // No Remap-* lines: with them apt-cacher-ng answers 503 for deb.debian.org here.
      [
        `CacheDir: ${acngCache}`,
        `LogDir: ${acngConf}`,
        "SupportDir: /usr/lib/apt-cacher-ng",
        `Port: ${acngPort}`,
        `BindAddress: ${hostIp}`,
        "ForeGround: 1",
        "ExThreshold: 4",
        "",
      ].join("\n"),
    );
    const acngLog = openSync(path.join(runDir, "acng.log"), "a");
    acng = spawn("/usr/sbin/apt-cacher-ng", ["-c", acngConf], { stdio: ["ignore", acngLog, acngLog] });
    const acngChild = acng;
    undo.push(() => stopProcess(acngChild, "SIGTERM", 5000));
    await waitUntil("apt-cacher-ng listening", () => tcpOpen(hostIp, acngPort), 10_000);

    // The target as an operator would get it: root's SSH key installed, apt reaching a mirror.
    const sshKey = path.join(runDir, "id_ed25519");
    execFileSync("ssh-keygen", [
      "-q",
      "-t",
      "ed25519",
      "-N",
      "",
      "-C",
      "doppio-provision-test",
      "-f",
      sshKey,
    ]);
    mkdirSync(path.join(root, "root/.ssh"), { recursive: true, mode: 0o700 });
    writeFileSync(path.join(root, "root/.ssh/authorized_keys"), readFileSync(`${sshKey}.pub`), {
      mode: 0o600,
    });
    writeFileSync(
      path.join(root, "etc/apt/apt.conf.d/01proxy"),
      `Acquire::http::Proxy "http://${hostIp}:${acngPort}";\n`,
    );
    writeFileSync(path.join(root, "etc/hostname"), `${name}\n`);
    writeFileSync(path.join(root, "etc/motd"), "Debian test host for doppiobox provisioning\n");

    const log = openSync(path.join(runDir, "container.log"), "a");
    container = spawn(
      "systemd-nspawn",
      [
        "--boot",
        "--register=no",
        "--keep-unit",
        "--quiet",
        `--machine=${name}`,
        `--network-namespace-path=/run/netns/${name}`,
        // The agent builds its bridge, TAPs and nftables tables in the container's namespace
        // (ours): it needs CAP_NET_ADMIN there and /dev/net/tun.
        "--capability=CAP_NET_ADMIN",
        "--bind=/dev/net/tun",
        "-D",
        root,
      ],
      {
        stdio: ["ignore", log, log],
        // /proc/sys/net writable in the container (ip_forward), as on a real host.
        env: { ...process.env, SYSTEMD_NSPAWN_API_VFS_WRITABLE: "network" },
      },
    );
    const containerChild = container;
    undo.push(async () => {
      // SIGTERM to systemd-nspawn powers the container off in order.
      await stopProcess(containerChild, "SIGTERM", 15_000);
    });
    await waitUntil("sshd in the test host", () => tcpOpen(ip, 22), 30_000);

    const knownHosts = path.join(runDir, "known_hosts");
    const inventory = path.join(runDir, "inventory.ini");
    writeFileSync(
      inventory,
      [
        "[doppio_hosts]",
        `${name} ansible_host=${ip} ansible_user=root ansible_ssh_private_key_file=${sshKey}`,
        "",
      ].join("\n"),
    );
    const controlDir = path.join(runDir, "cp");
    mkdirSync(controlDir, { recursive: true });
    undo.push(() => {
      // ssh connection masters Ansible left (ControlPersist): ask each to exit.
      for (const sock of readdirSync(controlDir)) {
        try {
          execFileSync("ssh", ["-O", "exit", "-o", `ControlPath=${path.join(controlDir, sock)}`, "x"], {
            stdio: "ignore",
            timeout: 5000,
          });
        } catch {
          // already gone
        }
      }
    });
    undo.push(() => {
      for (const s of servers) s.close();
    });

    const host: TestHost = {
      name,
      ip,
      hostIp,
      runDir,
      sshKey,
      knownHosts,
      inventory,
      ssh(command, timeoutMs = 60_000) {
        return execFileSync(
          "ssh",
          [
            "-i",
            sshKey,
            "-o",
            "BatchMode=yes",
            "-o",
            `UserKnownHostsFile=${knownHosts}`,
            "-o",
            "StrictHostKeyChecking=accept-new",
            `root@${ip}`,
            command,
          ],
          { encoding: "utf8", timeout: timeoutMs },
        );
      },
      async forward(targetPort) {
        const server = createServer((inbound) => {
          const outbound = createConnection({ host: "127.0.0.1", port: targetPort });
          inbound.pipe(outbound).pipe(inbound);
          inbound.on("error", () => outbound.destroy());
          outbound.on("error", () => inbound.destroy());
        });
        servers.push(server);
        await new Promise<void>((resolve) => server.listen(0, hostIp, resolve));
        return (server.address() as { port: number }).port;
      },
      stop,
    };
    return host;
  } catch (err) {
    await stop().catch(() => {});
    throw err;
  }
}

function tcpOpen(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createConnection({ host, port });
    s.setTimeout(1000);
    s.once("connect", () => {
      s.destroy();
      resolve(true);
    });
    s.once("error", () => resolve(false));
    s.once("timeout", () => {
      s.destroy();
      resolve(false);
    });
  });
}
