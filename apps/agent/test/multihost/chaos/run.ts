import { copyFileSync, existsSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import pg from "pg";
import { fakeVmmAlive } from "../../support/fake-executor.ts";
import { netnsUnavailable } from "../../support/netns.ts";
import { type Check, endChecks, type RunFacts } from "./checks.ts";
import {
  type ChaosBackend,
  type Cluster,
  clusterFeatures,
  RECONCILE_INTERVAL_MS,
  startCluster,
} from "./cluster.ts";
import { fakeVmmPids } from "./fake-facts.ts";
import { type PausedGuest, qemuVmmPids, waitGuestRunsAgain, writeIntoGuestOnFullDisk } from "./qemu-facts.ts";
import { EventWatcher, rng, runWorkload } from "./workload.ts";

type InjectionKind =
  | "kill-agent"
  | "kill-replica"
  | "cut-network"
  | "kill-vmm"
  | "kill-caddy"
  | "restart-postgres"
  | "disk-full";

interface Injection {
  /** Fired when this many jobs have been accepted. */
  atJob: number;
  kind: InjectionKind;
  target: number;
  downMs: number;
  /** Which of the target host's running VMs a kill-vmm takes (a fraction of the sorted list). */
  pick: number;
}

export interface ChaosOptions {
  jobs: number;
  seed: number;
  replicas?: number;
  hosts?: number;
  /** fake (default): the fake executor's `sleep` VMMs; qemu: the agent program on real QEMU guests. */
  backend?: ChaosBackend;
  log?: (line: string) => void;
}

export interface ChaosSummary {
  plan: Injection[];
  injected: string[];
  checks: Check[];
  ok: boolean;
}

/** The run's injections, a pure function of the seed and the run's shape (printed first). */
function planInjections(
  seed: number,
  jobs: number,
  hosts: number,
  replicas: number,
  kinds: InjectionKind[],
): Injection[] {
  const random = rng(seed);
  const count = Math.max(kinds.length, Math.floor(jobs / 8));
  const plan: Injection[] = [];
  for (let i = 0; i < count; i++) {
    // Every kind at least once, then at random.
    const kind = i < kinds.length ? kinds[i]! : kinds[Math.floor(random() * kinds.length)]!;
    plan.push({
      atJob: 1 + Math.floor(random() * Math.max(1, jobs - 2)),
      kind,
      target: Math.floor(random() * (kind === "kill-replica" ? replicas : hosts)),
      downMs: 1_000 + Math.floor(random() * 4_000),
      pick: random(),
    });
  }
  return plan.sort((a, b) => a.atJob - b.atJob);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A killed replica comes back; while PostgreSQL is down it cannot, so it tries again. */
async function startReplica(
  replica: Cluster["replicas"][number],
  log: (line: string) => void,
): Promise<void> {
  for (let i = 0; ; i++) {
    try {
      return await replica.start();
    } catch (err) {
      if (i >= 20) throw err;
      log(`  replica did not start (${(err as Error).message}); again in 1 s`);
      await sleep(1_000);
    }
  }
}

async function inFlight(databaseUrl: string): Promise<number> {
  const c = new pg.Client({ connectionString: databaseUrl });
  await c.connect();
  try {
    const r = await c.query<{ n: string }>(
      "select count(*) as n from agent_jobs where status in ('pending', 'delivered', 'running')",
    );
    return Number(r.rows[0]!.n);
  } finally {
    await c.end();
  }
}

/**
 * A chaos run: real control-plane replicas (processes) on the run's own PostgreSQL behind a
 * balancer, agent processes on hosts in their own network namespaces (fake VMM, state on
 * disk, a real process per running VMM, a real Caddy, disks on a small filesystem; or with
 * `backend: "qemu"` the agent program on real QEMU guests, cluster.ts), a
 * user's stream of `jobs` box actions, and the seed's injections (kill -9 of an agent, a
 * replica, a VMM process or Caddy; the host's link to the control plane cut; PostgreSQL
 * crashed and restarted; a host's disk filled up). Then, with everything back, the end
 * checks (checks.ts).
 */
export async function runChaos(opts: ChaosOptions): Promise<ChaosSummary> {
  const log = opts.log ?? ((line: string) => console.log(line));
  const replicas = opts.replicas ?? 2;
  const hosts = opts.hosts ?? 3;
  const whyNoNetns = netnsUnavailable();
  if (whyNoNetns) log(`NOTE: hosts share this namespace and no network cut is injected (${whyNoNetns})`);
  const backend = opts.backend ?? "fake";
  const features = clusterFeatures(whyNoNetns === null);
  if (features.whyNoPg) log(`NOTE: the shared PostgreSQL is used and never restarted (${features.whyNoPg})`);
  if (features.whyNoCaddy) log(`NOTE: hosts run no Caddy (${features.whyNoCaddy})`);
  if (features.whyNoDisks) log(`NOTE: no disk is filled (${features.whyNoDisks})`);
  const kinds: InjectionKind[] = [
    "kill-agent",
    "kill-replica",
    "kill-vmm",
    ...(whyNoNetns === null ? (["cut-network"] as const) : []),
    ...(features.whyNoCaddy === null ? (["kill-caddy"] as const) : []),
    ...(features.whyNoPg === null ? (["restart-postgres"] as const) : []),
    ...(features.whyNoDisks === null ? (["disk-full"] as const) : []),
  ];
  const plan = planInjections(opts.seed, opts.jobs, hosts, replicas, kinds);
  log(`chaos: ${opts.jobs} jobs, seed ${opts.seed}, ${replicas} replicas, ${hosts} hosts, ${backend} VMMs`);
  for (const p of plan) log(`  plan: at job ${p.atJob}: ${p.kind} #${p.target} for ${p.downMs} ms`);

  const started = Date.now();
  const cluster: Cluster = await startCluster({ replicas, hosts, netns: whyNoNetns === null, backend, log });
  log(`  ${((Date.now() - started) / 1000).toFixed(1)} s cluster up`);
  // Interrupted (Ctrl-C, a CI timeout): what the run started goes with it, as at its end.
  const interrupted = (signal: NodeJS.Signals) => {
    log(`chaos: ${signal}: stopping what the run started`);
    void cluster.close().finally(() => process.exit(130));
  };
  process.once("SIGINT", interrupted);
  process.once("SIGTERM", interrupted);
  const injected: string[] = [];
  const running: Promise<void>[] = [];
  const down = new Set<string>();
  const stamp = () => `${((Date.now() - started) / 1000).toFixed(1)} s`;
  // Boxes an injection holds (disk-full's paused guest): the workload sends them nothing.
  const held = new Set<string>();
  const busy = new Set<string>();
  const facts: RunFacts = { diskFullHosts: new Set(), killedVmms: new Set(), stuckGuests: [] };
  const say = (line: string) => {
    injected.push(`${stamp()} ${line}`);
    log(`  ${injected.at(-1)}`);
  };
  const keyOf = (p: Injection) =>
    p.kind === "kill-replica"
      ? `replica${p.target}`
      : p.kind === "restart-postgres"
        ? "postgres"
        : p.kind === "kill-caddy"
          ? `caddy${p.target}`
          : p.kind === "disk-full"
            ? `disk${p.target}`
            : p.kind === "kill-vmm"
              ? "vmm"
              : `host${p.target}`;
  // Every host's running VMMs (hosts in order, then slugs), but a guest a disk-full holds:
  // its check wants that VM running again by itself.
  const runningVmms = async () => {
    const running: Array<{ slug: string; pid: number; host: string }> = [];
    for (const h of cluster.hosts) {
      const vmms =
        h.backend === "qemu"
          ? await qemuVmmPids(h)
          : fakeVmmPids(h.stateFile).filter((v) => fakeVmmAlive(v.pid));
      running.push(...vmms.filter((v) => !held.has(v.slug)).map((v) => ({ ...v, host: h.name })));
    }
    return running;
  };
  // QEMU mode: a disk-full fills the host of a running box it holds first (no action in
  // flight, and the workload sends it none until its guest runs again), so that a guest meets
  // the full disk (writeIntoGuestOnFullDisk). Early in a run every box may still be starting:
  // it waits up to a minute for one.
  const holdRunningGuest = async (planned: number): Promise<{ target: number; slug: string } | null> => {
    const n = cluster.hosts.length;
    for (const deadline = Date.now() + 60_000; Date.now() < deadline; await sleep(500)) {
      for (let k = 0; k < n; k++) {
        const target = (planned + k) % n;
        if (down.has(`disk${target}`)) continue; // another disk-full holds that host's disk
        for (const { slug } of await qemuVmmPids(cluster.hosts[target]!)) {
          // Checked and held in one turn: a worker takes a box (busy) in one turn too.
          if (busy.has(slug) || held.has(slug)) continue;
          held.add(slug);
          const box = await cluster.user.get(`/api/v1/boxes/${slug}`).catch(() => null);
          if (box?.body?.status === "running") return { target, slug };
          held.delete(slug);
        }
      }
    }
    return null;
  };
  const fire = async (planned: Injection) => {
    const guest =
      planned.kind === "disk-full" && backend === "qemu" ? await holdRunningGuest(planned.target) : null;
    const p = guest ? { ...planned, target: guest.target } : planned;
    const key = keyOf(p);
    const replicasDown = [...down].filter((k) => k.startsWith("replica")).length;
    if (down.has(key) || (p.kind === "kill-replica" && replicasDown >= replicas - 1)) {
      say(`skipped ${p.kind} #${p.target} (already down, or the last replica standing)`);
      if (guest) held.delete(guest.slug);
      return;
    }
    const host = cluster.hosts[p.target]!;
    const replica = cluster.replicas[p.target]!;
    if (p.kind === "kill-vmm") {
      // No wait: the VM's agent notices the dead VMM and starts it again.
      // Any host's running VM (hosts in order, then slugs): a lone host often runs none, and
      // early in a run every box may still be starting, so it waits up to a minute for one.
      let victim: { slug: string; pid: number; host: string } | undefined;
      for (const deadline = Date.now() + 60_000; !victim && Date.now() < deadline; ) {
        const running = await runningVmms();
        victim = running[Math.floor(p.pick * running.length)];
        if (!victim) await sleep(500);
      }
      if (!victim) return say("skipped kill-vmm (no VM ran for a minute)");
      facts.killedVmms.add(`${victim.host}/${victim.slug}`);
      process.kill(victim.pid, "SIGKILL");
      // What the box was doing (a launch in flight launches again; a running box is restarted by reconcile).
      const box = await cluster.user.get(`/api/v1/boxes/${victim.slug}`).catch(() => null);
      return say(
        `kill-vmm (${victim.slug}'s VMM, pid ${victim.pid}, on ${victim.host}; the box was ${box?.body?.status ?? "?"})`,
      );
    }
    down.add(key);
    const what =
      p.kind === "kill-replica"
        ? `pid ${replica.pid}`
        : p.kind === "restart-postgres"
          ? `postmaster pid ${cluster.postgres!.pid}, immediate shutdown`
          : p.kind === "kill-caddy"
            ? `${host.name}'s Caddy, pid ${host.caddy!.pid}`
            : host.name;
    say(`${p.kind} #${p.target} (${what})`);
    let paused: PausedGuest | null = null;
    if (p.kind === "kill-agent") await host.agent.kill("SIGKILL");
    if (p.kind === "kill-replica") await replica.kill("SIGKILL");
    if (p.kind === "cut-network") cluster.setLink(host, false);
    if (p.kind === "kill-caddy") await host.caddy!.kill("SIGKILL");
    if (p.kind === "restart-postgres") await cluster.postgres!.crash();
    if (p.kind === "disk-full") {
      facts.diskFullHosts.add(host.name);
      log(`  ${stamp()} disk-full #${p.target}: ${host.disks!.fill()} bytes written until ENOSPC`);
      if (guest) {
        // Room freed meanwhile (a job's undo removing its files) would let the guest's write
        // through: the disk is topped up while the guest writes, as a runaway writer would.
        const keepFull = setInterval(() => {
          try {
            host.disks!.fill();
          } catch {}
        }, 200);
        const wrote = await writeIntoGuestOnFullDisk(host, guest.slug).finally(() => clearInterval(keepFull));
        log(`  ${stamp()} disk-full #${p.target}: ${wrote.said}`);
        paused = wrote.paused;
        if (!paused) held.delete(guest.slug);
      } else if (host.backend === "qemu") {
        log(`  ${stamp()} disk-full #${p.target}: no box ran for a minute: no guest wrote`);
      }
    }
    // A full disk stays full longer, so that some host's job meets it.
    await sleep(p.kind === "disk-full" ? p.downMs * 3 : p.downMs);
    if (p.kind === "kill-agent") host.agent.start();
    if (p.kind === "kill-replica") await startReplica(replica, log);
    if (p.kind === "cut-network") cluster.setLink(host, true);
    // systemd's Restart=always: Caddy comes back with its unit's config, the agent reloads its own.
    if (p.kind === "kill-caddy") await host.caddy!.start();
    if (p.kind === "restart-postgres") await cluster.postgres!.startServer();
    if (p.kind === "disk-full") {
      host.disks!.free();
      if (paused) {
        // Reconcile (every RECONCILE_INTERVAL_MS) lets the guest run again: counted from the
        // moment the host's agent runs, since a kill-agent may hold it down right now (a cut
        // link shares that key; waiting for it too only starts the count later).
        const agentDown = `host${p.target}`;
        if (down.has(agentDown)) log(`  ${stamp()} disk-full #${p.target}: freed; waiting for its agent`);
        while (down.has(agentDown)) await sleep(100);
        const after = await waitGuestRunsAgain(paused, 3 * RECONCILE_INTERVAL_MS);
        log(`  ${stamp()} disk-full #${p.target}: ${after.said}`);
        if (after.stuck) facts.stuckGuests.push(after.said);
        held.delete(paused.slug);
      }
    }
    down.delete(key);
    log(`  ${stamp()} ${p.kind} #${p.target}: back`);
  };

  let watcher: EventWatcher | null = null;
  try {
    // Every host heartbeats before the first box is placed.
    for (let i = 0; ; i++) {
      const list = await cluster.admin.get("/api/v1/servers");
      if (list.body.servers.every((s: { lastHeartbeatAt: string | null }) => s.lastHeartbeatAt)) break;
      if (i > 300) throw new Error("hosts did not heartbeat");
      await sleep(200);
    }
    watcher = new EventWatcher(cluster.user);
    const queue = [...plan];
    const submitted = await runWorkload(cluster.user, {
      total: opts.jobs,
      parallel: 4,
      random: rng(opts.seed ^ 0x5eed),
      log,
      held,
      busy,
      onSubmitted: async (n) => {
        while (queue[0] && queue[0].atJob <= n) running.push(fire(queue.shift()!));
      },
    });
    log(`  ${stamp()} workload done: ${submitted.length} jobs accepted; waiting for the injections to end`);
    for (const p of queue) running.push(fire(p));
    // An injection that never ends (a process that does not come back) says so instead of hanging quietly.
    const waiting = setInterval(
      () => log(`  ${stamp()} still down: ${[...down].join(", ") || "(none)"}`),
      30_000,
    );
    await Promise.all(running).finally(() => clearInterval(waiting));
    log(`  ${stamp()} all ${submitted.length} accepted; everything back; waiting for the last jobs`);
    for (let i = 0; i < 600 && (await inFlight(cluster.databaseUrl)) > 0; i++) await sleep(200);
    // The stream and the hosts' files settle a moment after the last job.
    let checks = await endChecks(cluster, submitted, watcher, facts);
    for (let i = 0; i < 20 && checks.some((c) => !c.ok); i++) {
      await sleep(500);
      checks = await endChecks(cluster, submitted, watcher, facts);
    }
    log(`chaos: done in ${stamp()}`);
    for (const c of checks) log(`  ${c.ok ? "ok  " : "FAIL"} ${c.name}: ${c.detail}`);
    const ok = checks.every((c) => c.ok);
    if (!ok) {
      // The hosts' data dirs go with the cluster: keep the agents' logs that explain the failure.
      const kept = mkdtempSync(path.join(tmpdir(), `doppio-chaos-${opts.seed}-`));
      for (const h of cluster.hosts) {
        if (existsSync(h.agent.logFile))
          copyFileSync(h.agent.logFile, path.join(kept, `${h.name}-agent.log`));
      }
      log(`chaos: the agents' logs are kept in ${kept}`);
    }
    return { plan, injected, checks, ok };
  } catch (err) {
    // The processes' logs go with the cluster: keep what explains the failure.
    for (const r of cluster.replicas) {
      const file = path.join(r.dir, "api.log");
      const lines = existsSync(file) ? readFileSync(file, "utf8").trim().split("\n") : [];
      log(`replica ${r.url}, last lines of its log:\n${lines.slice(-15).join("\n")}`);
    }
    throw err;
  } finally {
    process.off("SIGINT", interrupted);
    process.off("SIGTERM", interrupted);
    await watcher?.stop();
    await cluster.close();
  }
}
