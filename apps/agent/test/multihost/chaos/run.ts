import pg from "pg";
import { netnsUnavailable } from "../../support/netns.ts";
import { type Check, endChecks } from "./checks.ts";
import { type Cluster, startCluster } from "./cluster.ts";
import { EventWatcher, rng, runWorkload } from "./workload.ts";

type InjectionKind = "kill-agent" | "kill-replica" | "cut-network";

interface Injection {
  /** Fired when this many jobs have been accepted. */
  atJob: number;
  kind: InjectionKind;
  target: number;
  downMs: number;
}

export interface ChaosOptions {
  jobs: number;
  seed: number;
  replicas?: number;
  hosts?: number;
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
  netns: boolean,
): Injection[] {
  const random = rng(seed);
  const kinds: InjectionKind[] = ["kill-agent", "kill-replica", ...(netns ? (["cut-network"] as const) : [])];
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
    });
  }
  return plan.sort((a, b) => a.atJob - b.atJob);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

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
 * A chaos run: real control-plane replicas (processes) on PostgreSQL behind a balancer,
 * agent processes on hosts in their own network namespaces (fake VMM, state on disk), a
 * user's stream of `jobs` box actions, and the seed's injections (kill -9 of an agent or a
 * replica, the host's link to the control plane cut). Then, with everything back, the
 * end checks (checks.ts).
 */
export async function runChaos(opts: ChaosOptions): Promise<ChaosSummary> {
  const log = opts.log ?? ((line: string) => console.log(line));
  const replicas = opts.replicas ?? 2;
  const hosts = opts.hosts ?? 3;
  const whyNoNetns = netnsUnavailable();
  if (whyNoNetns) log(`NOTE: hosts share this namespace and no network cut is injected (${whyNoNetns})`);
  const plan = planInjections(opts.seed, opts.jobs, hosts, replicas, whyNoNetns === null);
  log(`chaos: ${opts.jobs} jobs, seed ${opts.seed}, ${replicas} replicas, ${hosts} hosts`);
  for (const p of plan) log(`  plan: at job ${p.atJob}: ${p.kind} #${p.target} for ${p.downMs} ms`);

  const started = Date.now();
  const cluster: Cluster = await startCluster({ replicas, hosts, netns: whyNoNetns === null });
  const injected: string[] = [];
  const running: Promise<void>[] = [];
  const down = new Set<string>();
  const stamp = () => `${((Date.now() - started) / 1000).toFixed(1)} s`;
  const fire = async (p: Injection) => {
    const key = `${p.kind === "kill-replica" ? "replica" : "host"}${p.target}`;
    const replicasDown = [...down].filter((k) => k.startsWith("replica")).length;
    if (down.has(key) || (p.kind === "kill-replica" && replicasDown >= replicas - 1)) {
      injected.push(`${stamp()} skipped ${p.kind} #${p.target} (already down, or the last replica standing)`);
      log(`  ${injected.at(-1)}`);
      return;
    }
    down.add(key);
    const host = cluster.hosts[p.target]!;
    const replica = cluster.replicas[p.target]!;
    injected.push(
      `${stamp()} ${p.kind} #${p.target} (${p.kind === "kill-replica" ? `pid ${replica.pid}` : host.name})`,
    );
    log(`  ${injected.at(-1)}`);
    if (p.kind === "kill-agent") await host.agent.kill("SIGKILL");
    if (p.kind === "kill-replica") await replica.kill("SIGKILL");
    if (p.kind === "cut-network") cluster.setLink(host, false);
    await sleep(p.downMs);
    if (p.kind === "kill-agent") host.agent.start();
    if (p.kind === "kill-replica") await replica.start();
    if (p.kind === "cut-network") cluster.setLink(host, true);
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
      onSubmitted: async (n) => {
        while (queue[0] && queue[0].atJob <= n) running.push(fire(queue.shift()!));
      },
    });
    for (const p of queue) running.push(fire(p));
    await Promise.all(running);
    log(`  ${stamp()} all ${submitted.length} accepted; everything back; waiting for the last jobs`);
    for (let i = 0; i < 600 && (await inFlight(cluster.databaseUrl)) > 0; i++) await sleep(200);
    // The stream and the hosts' files settle a moment after the last job.
    let checks = await endChecks(cluster, submitted, watcher);
    for (let i = 0; i < 20 && checks.some((c) => !c.ok); i++) {
      await sleep(500);
      checks = await endChecks(cluster, submitted, watcher);
    }
    log(`chaos: done in ${stamp()}`);
    for (const c of checks) log(`  ${c.ok ? "ok  " : "FAIL"} ${c.name}: ${c.detail}`);
    return { plan, injected, checks, ok: checks.every((c) => c.ok) };
  } finally {
    await watcher?.stop();
    await cluster.close();
  }
}
