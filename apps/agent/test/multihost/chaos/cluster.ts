import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { copyFileSync, existsSync, mkdirSync, symlinkSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import pg from "pg";
import { TestClient } from "../../../../api/test/support/client.ts";
import {
  ADMIN_EMAIL,
  ADMIN_PASSWORD,
  freshPostgresDatabase,
} from "../../../../api/test/support/control-plane.ts";
import { freePort } from "../../../../api/test/support/ports.ts";
import { ReplicaProcess } from "../../../../api/test/support/replica-process.ts";
import { RoundRobinProxy } from "../../../../api/test/support/round-robin-proxy.ts";
import { buildMinimalImage, qemuUnavailable, REPO } from "../../qemu/support.ts";
import { AgentProcess } from "../../support/agent-process.ts";
import { findCaddy } from "../../support/caddy.ts";
import { FAKE_DISK_BYTES, fakeVmmAlive } from "../../support/fake-executor.ts";
import { TestNetns } from "../../support/netns.ts";
import { SmallFs } from "../../support/small-fs.ts";
import { fakeVmmPids } from "./fake-facts.ts";
import { HostCaddy } from "./host-caddy.ts";
import { PrivatePostgres, privatePostgresUnavailable } from "./private-postgres.ts";
import { qemuProcesses } from "./qemu-facts.ts";

/** What runs the hosts' VMs: the fake executor (`sleep` processes) or the real agent on QEMU. */
export type ChaosBackend = "fake" | "qemu";

/** Control-plane settings for a run measured in seconds, not hours. */
const REPLICA_CONFIG = {
  reaperIntervalMs: 1_000,
  deliveryLeaseMs: 5_000,
  runningLeaseMs: 120_000,
  heartbeatFreshMs: 8_000,
  boxQuotaPerUser: 1_000,
  boxCreatesPerMinute: 100_000,
  authRateLimitPerMinute: 100_000,
};

/**
 * One "host": an agent process in its own namespace when root, with a real Caddy in front of
 * it. Fake backend: the fake executor (state in a file, a real OS process standing for each
 * running VMM), its boxes' disks on a small filesystem of their own when root. QEMU backend:
 * the agent program (src/main.ts) with `backend: qemu`, `networkMode: tap` (bridge, TAPs and
 * firewall in the host's namespace) and the minimal template.
 */
export interface Host {
  name: string;
  backend: ChaosBackend;
  domain: string;
  dataDir: string;
  /** The fake executor's state (fake backend only). */
  stateFile: string;
  agent: AgentProcess;
  /** The agent's own API address (inside the host's namespace). */
  agentListen: string;
  netns: TestNetns | null;
  /** The root-namespace end of the host's link to the control plane (null without netns). */
  link: string | null;
  /** The host's Caddy and where its edge listens (reachable from this process); null without. */
  caddy: HostCaddy | null;
  edgeListen: string | null;
  /** The size-limited filesystem holding the boxes' disks; null without root. */
  disks: SmallFs | null;
}

export interface Cluster {
  databaseUrl: string;
  /** The run's own PostgreSQL (it can be crashed); null when the shared one is used. */
  postgres: PrivatePostgres | null;
  replicas: ReplicaProcess[];
  lb: RoundRobinProxy;
  /** The balancer's URL from this process. */
  url: string;
  hosts: Host[];
  /** A user's client (bearer token) through the balancer. */
  user: TestClient;
  /** The administrator through the balancer (bearer token). */
  admin: TestClient;
  setLink(host: Host, up: boolean): void;
  close(): Promise<void>;
}

const sh = (file: string, args: string[]) => execFileSync(file, args, { stdio: "pipe" });

function killFakeVmms(stateFile: string): void {
  for (const { pid } of fakeVmmPids(stateFile)) if (fakeVmmAlive(pid)) process.kill(pid, "SIGKILL");
}

/** Disk room per host: a few dozen fake disks, so a burst of creates fits but a filler does not. */
const DISKS_FS_BYTES = 64 * FAKE_DISK_BYTES;
/**
 * A QEMU host's whole data dir (its store, golden snapshot with its mapped RAM, volume pool
 * and boxes) on an ext4 of this size: room for a few boxes of the minimal template.
 */
const QEMU_DATA_FS_BYTES = 1024 * 1024 * 1024;

/** How often each host's agent reconciles (loops/reconcile.ts): what lets a paused guest run again. */
export const RECONCILE_INTERVAL_MS = 2_000;

/** What this machine lets the run use beyond processes: root-only parts, each with why not. */
export function clusterFeatures(netns: boolean) {
  const whyNoPg = privatePostgresUnavailable();
  const whyNoCaddy = !netns ? "hosts share one namespace" : findCaddy() ? null : "caddy is not installed";
  const whyNoDisks = process.getuid?.() === 0 ? null : "mounting a size-limited filesystem needs root";
  return { whyNoPg, whyNoCaddy, whyNoDisks };
}

/** Why the QEMU mode cannot run here (root, netns, QEMU and the image tools), or null. */
export function qemuModeUnavailable(): string | null {
  return qemuUnavailable() ?? (findCaddy() ? null : "caddy is not installed");
}

/** The minimal image the QEMU hosts serve, built once into the shared cache (qemu/support.ts). */
const CHAOS_IMAGE = "chaos";
/** The guests' memory: the minimal busybox guest needs little (its template default). */
const GUEST_MEMORY_MB = 256;

/**
 * A QEMU host's data dir before its agent starts: the minimal image as version "1" (the
 * template's, which the agent builds its golden from with no current.json), its files
 * linked from the shared cache, and the cached KVM probe verdict (TCG here).
 */
function prepareQemuDataDir(dataDir: string, imageDir: string): void {
  const version = path.join(dataDir, "images", "minimal", "1");
  mkdirSync(version, { recursive: true });
  for (const f of ["vmlinuz", "initrd.img", "rootfs.qcow2", "manifest.json"])
    symlinkSync(path.join(imageDir, f), path.join(version, f));
  mkdirSync(path.join(dataDir, "qemu"), { recursive: true });
  const accel = path.join(REPO, ".data", "qemu-accel.json");
  if (existsSync(accel)) copyFileSync(accel, path.join(dataDir, "qemu", "accel.json"));
}

/** Kills every qemu-system process left in a QEMU host's namespace, by PID. */
function killQemus(h: Pick<Host, "netns">): void {
  if (!h.netns) return;
  for (const pid of qemuProcesses(h)) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // gone meanwhile
    }
  }
}

/**
 * The hosts' golden snapshots, built through the control plane (a build_golden job per
 * host). A build that fails (a guest not ready in time on a loaded 2-core machine) is said
 * with its error and queued once more, as an operator would.
 */
async function buildGoldens(
  admin: TestClient,
  databaseUrl: string,
  hosts: Host[],
  log: (line: string) => void,
): Promise<void> {
  for (let i = 0; ; i++) {
    const list = await admin.get("/api/v1/servers");
    if (list.body.servers.every((s: { lastHeartbeatAt: string | null }) => s.lastHeartbeatAt)) break;
    if (i > 300) throw new Error("hosts did not heartbeat");
    await sleep(200);
  }
  const queue = async (h: Host) => {
    const res = await admin.post(`/api/v1/servers/${h.name}/golden`, { template: "minimal" });
    if (res.status !== 202)
      throw new Error(`golden build on ${h.name}: ${res.status} ${JSON.stringify(res.body)}`);
    return res.body.id as string;
  };
  const db = new pg.Client({ connectionString: databaseUrl });
  await db.connect();
  try {
    const pending = new Map<string, { host: Host; job: string; tries: number }>();
    for (const h of hosts) pending.set(h.name, { host: h, job: await queue(h), tries: 1 });
    const deadline = Date.now() + 8 * 60_000;
    while (pending.size > 0) {
      if (Date.now() > deadline)
        throw new Error(`golden builds still running on ${[...pending.keys()].join(", ")}`);
      await sleep(1_000);
      for (const [name, p] of pending) {
        const row = (
          await db.query<{ status: string; error: string | null }>(
            "select status, error from agent_jobs where id = $1",
            [p.job],
          )
        ).rows[0];
        if (row?.status === "succeeded") pending.delete(name);
        if (row?.status !== "failed") continue;
        if (p.tries >= 2) throw new Error(`golden build on ${name} failed twice: ${row.error}`);
        log(`  golden build on ${name} failed (${row.error}); queued again`);
        pending.set(name, { host: p.host, job: await queue(p.host), tries: p.tries + 1 });
      }
    }
  } finally {
    await db.end();
  }
  // Placement reads the golden status from the hosts' heartbeats.
  for (let i = 0; ; i++) {
    const list = await admin.get("/api/v1/servers");
    const servers = list.body.servers as Array<{ golden: Record<string, { status: string }> }>;
    if (servers.every((s) => s.golden.minimal?.status === "ready")) return;
    if (i > 60) throw new Error("golden builds succeeded but the servers do not say ready");
    await sleep(500);
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function startCluster(opts: {
  replicas: number;
  hosts: number;
  netns: boolean;
  backend?: ChaosBackend;
  log?: (line: string) => void;
}): Promise<Cluster> {
  const backend = opts.backend ?? "fake";
  if (backend === "qemu" && !opts.netns) throw new Error("the QEMU mode needs a namespace per host");
  const features = clusterFeatures(opts.netns);
  // Built (or found unchanged) before anything starts: the build script skips unchanged inputs.
  const imageDir = backend === "qemu" ? buildMinimalImage(CHAOS_IMAGE) : null;
  const cleanup: Array<() => Promise<void> | void> = [];
  const close = async () => {
    for (const undo of cleanup.reverse()) await Promise.resolve(undo()).catch(() => {});
  };
  try {
    let postgres: PrivatePostgres | null = null;
    let db: { url: string };
    if (features.whyNoPg === null) {
      const p = await PrivatePostgres.start(await freePort());
      postgres = p;
      cleanup.push(() => p.close());
      db = { url: p.url };
    } else {
      const shared = await freshPostgresDatabase();
      cleanup.push(() => shared.drop());
      db = shared;
    }
    const replicas: ReplicaProcess[] = [];
    for (let i = 0; i < opts.replicas; i++) {
      const r = await ReplicaProcess.prepare(db.url, await freePort(), REPLICA_CONFIG);
      cleanup.push(() => r.remove());
      await r.start();
      replicas.push(r);
    }
    const backends = replicas.map((r) => ({ host: "127.0.0.1", port: Number(new URL(r.url).port) }));
    const lb = await RoundRobinProxy.start(backends);
    cleanup.push(() => lb.close());
    const url = `http://127.0.0.1:${lb.port}`;

    // Sign in on one replica directly (its own origin), then work with bearer tokens through the balancer.
    const direct = new TestClient(replicas[0]!.url);
    const login = await direct.post("/api/v1/auth/login", { email: ADMIN_EMAIL, password: ADMIN_PASSWORD });
    if (login.status !== 200) throw new Error(`admin login: ${login.status}`);
    const adminToken = (await direct.post("/api/v1/tokens", { name: "chaos-admin" })).body.token as string;
    const admin = new TestClient(url, adminToken);

    const hosts: Host[] = [];
    const tag = randomBytes(2).toString("hex");
    const octet = 200 + (randomBytes(1)[0]! % 50);
    for (let i = 0; i < opts.hosts; i++) {
      const name = `chaos-${i}`;
      const reg = await admin.post("/api/v1/servers", {
        name,
        domain: `${name}.example.test`,
        backend: "qemu",
        capacity: { vcpu: 256, memoryMb: 1024 * 1024, diskGb: 10_000 },
      });
      if (reg.status !== 201) throw new Error(`register ${name}: ${reg.status}`);
      // The host's own files (the agent's config and output, Caddy's) stay off the filesystem
      // a disk-full fills: on a QEMU host that is the agent's whole data dir.
      const root = await mkdtemp(path.join(tmpdir(), `doppio-${name}-`));
      cleanup.push(() => rm(root, { recursive: true, force: true }));
      const dataDir = imageDir ? path.join(root, "data") : root;
      let disks: SmallFs | null = null;
      if (features.whyNoDisks === null) {
        const fs = imageDir
          ? SmallFs.mount(dataDir, QEMU_DATA_FS_BYTES, "ext4")
          : SmallFs.mount(path.join(dataDir, "disks"), DISKS_FS_BYTES);
        disks = fs;
        cleanup.push(() => fs.unmount());
      } else mkdirSync(dataDir, { recursive: true });
      let cpUrl = url;
      let netns: TestNetns | null = null;
      let link: string | null = null;
      if (opts.netns) {
        netns = TestNetns.create("dbxc");
        const ns = netns;
        cleanup.push(() => ns.destroy());
        link = `cx${tag}${i}h`;
        const peer = `cx${tag}${i}n`;
        const [hostIp, nsIp] = [`10.${octet}.${i}.1`, `10.${octet}.${i}.2`];
        sh("ip", ["link", "add", link, "type", "veth", "peer", "name", peer]);
        const hostLink = link;
        cleanup.push(() => {
          sh("ip", ["link", "del", hostLink]);
        });
        sh("ip", ["link", "set", peer, "netns", ns.name]);
        sh("ip", ["addr", "add", `${hostIp}/30`, "dev", link]);
        sh("ip", ["link", "set", link, "up"]);
        sh("ip", ["-n", ns.name, "addr", "add", `${nsIp}/30`, "dev", peer]);
        sh("ip", ["-n", ns.name, "link", "set", peer, "up"]);
        await lb.listenOn(hostIp);
        cpUrl = `http://${hostIp}:${lb.port}`;
      }
      let caddy: HostCaddy | null = null;
      let edgeListen: string | null = null;
      if (features.whyNoCaddy === null && netns) {
        const c = new HostCaddy(path.join(root, "caddy-run"), netns.name);
        caddy = c;
        cleanup.push(() => c.kill("SIGTERM"));
        await c.start();
        edgeListen = `10.${octet}.${i}.2:18080`;
      }
      const domain = `${name}.example.test`;
      // Each namespace has its own loopback; without namespaces the agents share one.
      const agentListen = `127.0.0.1:${netns ? 18090 : await freePort()}`;
      const stateFile = path.join(dataDir, "fake-host.json");
      if (imageDir) prepareQemuDataDir(dataDir, imageDir);
      const agent = await AgentProcess.prepare(
        root,
        {
          ...(imageDir
            ? {
                backend: "qemu",
                networkMode: "tap",
                templates: [{ name: "minimal", memoryMb: GUEST_MEMORY_MB }],
                capacity: { vcpu: 256, memoryMb: 1024 * 1024, diskGb: 10_000 },
              }
            : {}),
          controlPlaneUrl: cpUrl,
          serverToken: reg.body.agentToken,
          dataDir,
          domain,
          apiToken: `chaos-agent-api-token-${tag}-0123456789`,
          listen: agentListen,
          heartbeatIntervalMs: 1_000,
          claimWaitMs: 5_000,
          reconcileIntervalMs: RECONCILE_INTERVAL_MS,
          logLevel: "info",
          ...(caddy && edgeListen
            ? {
                caddyAdmin: caddy.adminAddress,
                edge: { tls: { mode: "http", listen: edgeListen }, checkIntervalMs: 1_000 },
              }
            : {}),
        },
        imageDir
          ? null
          : {
              stateFile,
              golden: { minimal: "ready" },
              stepDelayMs: 100,
              vmmProcesses: true,
              ...(disks ? { disksDir: disks.dir } : {}),
            },
        netns?.name,
      );
      // The VMM processes outlive the agent (daemonized): end them by PID, after the agent
      // (cleanup runs in reverse), so it cannot start new ones.
      const vmmsOf = { netns };
      cleanup.push(() => (imageDir ? killQemus(vmmsOf) : killFakeVmms(stateFile)));
      cleanup.push(() => agent.kill("SIGKILL").then(() => {}));
      agent.start();
      hosts.push({
        name,
        backend,
        domain,
        dataDir,
        stateFile,
        agent,
        agentListen,
        netns,
        link,
        caddy,
        edgeListen,
        disks,
      });
    }

    if (backend === "qemu") await buildGoldens(admin, db.url, hosts, opts.log ?? (() => {}));

    const signup = await new TestClient(replicas[0]!.url).post("/api/v1/auth/signup", {
      email: `chaos-${tag}@example.com`,
      password: "correct horse battery staple",
    });
    if (signup.status !== 201) throw new Error(`signup: ${signup.status}`);
    const userDirect = new TestClient(replicas[0]!.url);
    await userDirect.post("/api/v1/auth/login", {
      email: `chaos-${tag}@example.com`,
      password: "correct horse battery staple",
    });
    const userToken = (await userDirect.post("/api/v1/tokens", { name: "chaos" })).body.token as string;

    return {
      databaseUrl: db.url,
      postgres,
      replicas,
      lb,
      url,
      hosts,
      user: new TestClient(url, userToken),
      admin,
      setLink(host, up) {
        if (host.link) sh("ip", ["link", "set", host.link, up ? "up" : "down"]);
      },
      close,
    };
  } catch (err) {
    await close();
    throw err;
  }
}
