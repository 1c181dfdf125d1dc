/**
 * Control-plane load: K simulated agents (HTTP clients speaking the agent protocol: heartbeat,
 * long-poll claim, job events) and U users (list, create, stop, start, delete, read their
 * boxes) against 1 and then 2 control-plane replicas, each its own process, on one fresh
 * PostgreSQL database per run. Each run measures two windows on the same agents and users:
 * saturated (users send their next call as soon as the last is answered: the throughput the
 * replicas reach) and paced (each user thinks 0.5–1.5× `--think-ms` between calls, as people
 * at a dashboard do: the latency at a load the replicas can serve). Prints throughput, p50/p99
 * per route, the claim latency (a job created → its agent holds it) and the dispatch latency
 * (a user's create or action sent → the agent holds the job), side by side.
 *
 *   export TEST_DATABASE_URL=$(scripts/postgres.sh start)
 *   npm run bench:load [-- --agents 100 --users 200 --seconds 20 --think-ms 5000 --replicas 1,2]
 *
 * The load generator is this one Node process. The CPU used during the measured window by it,
 * by the replicas, by PostgreSQL's processes and by the whole machine is printed too (and how
 * late the generator's own event loop ran, which every latency here is read on): on a
 * small machine they share the cores, and that caps what a second replica can add.
 */
import { randomBytes } from "node:crypto";
import { setMaxListeners } from "node:events";
import { readdirSync, readFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { parseArgs } from "node:util";
import { AGENT_MAX_IN_FLIGHT } from "@doppio/contracts";
import { sleep } from "../../agent/src/clock.ts";
import { heartbeat, registerServer, signedInClient, type TestClient } from "../test/support/client.ts";
import { freshPostgresDatabase, POSTGRES_URL, signedInAdmin } from "../test/support/control-plane.ts";
import { freePort } from "../test/support/ports.ts";
import { ReplicaProcess } from "../test/support/replica-process.ts";

const { values } = parseArgs({
  options: {
    agents: { type: "string", default: "100" },
    users: { type: "string", default: "200" },
    seconds: { type: "string", default: "20" },
    "think-ms": { type: "string", default: "5000" },
    replicas: { type: "string", default: "1,2" },
  },
});
const AGENTS = Number(values.agents);
const USERS = Number(values.users);
const SECONDS = Number(values.seconds);
const THINK_MS = Number(values["think-ms"]);
const WARMUP_MS = 3_000;
/** The paced window's warm-up: arrival (one think time), second creates (1.5 more), then WARMUP_MS. */
const PACED_WARMUP_MS = (THINK_MS * 5) / 2 + WARMUP_MS;
const RUNS = values.replicas.split(",").map(Number);
const HEARTBEAT_MS = 10_000;
if (!POSTGRES_URL) {
  console.error("bench:load needs PostgreSQL: export TEST_DATABASE_URL=$(scripts/postgres.sh start)");
  process.exit(2);
}

const now = () => performance.now();

/**
 * A simulated agent's connections, as the real agent's (apps/agent/src/control-plane.ts):
 * at most AGENT_MAX_IN_FLIGHT requests at once beside its claim long-poll; more wait here.
 */
class AgentConnections {
  #free = AGENT_MAX_IN_FLIGHT;
  readonly #waiting: Array<() => void> = [];

  async send<T>(call: () => Promise<T>): Promise<T> {
    if (this.#free > 0) this.#free--;
    else await new Promise<void>((resolve) => this.#waiting.push(resolve));
    try {
      return await call();
    } finally {
      const next = this.#waiting.shift();
      if (next) next();
      else this.#free++;
    }
  }
}

/** Kernel clock ticks per second (USER_HZ), the unit of /proc's CPU times. */
const TICKS = 100;
/** CPU seconds (user + system) a process has used, from /proc/PID/stat; 0 once it is gone. */
function processCpu(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(f[11]) + Number(f[12])) / TICKS;
  } catch {
    return 0;
  }
}
/** Every PostgreSQL process on this machine (the server, its backends and workers). */
function postgresPids(): number[] {
  return readdirSync("/proc")
    .filter((d) => /^\d+$/.test(d))
    .filter((d) => {
      try {
        return readFileSync(`/proc/${d}/comm`, "utf8").trim() === "postgres";
      } catch {
        return false;
      }
    })
    .map(Number);
}
/** CPU seconds the whole machine has been busy (all but idle and iowait), from /proc/stat. */
function machineBusy(): number {
  const f = readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number);
  const total = f.reduce((a, b) => a + b, 0);
  return (total - f[3]! - f[4]!) / TICKS;
}
/** CPU seconds of several processes, each counted from its own start of the window. */
function cpuOf(pids: number[]): () => number {
  const start = new Map(pids.map((p) => [p, processCpu(p)]));
  return () => [...start].reduce((sum, [pid, c0]) => sum + Math.max(0, processCpu(pid) - c0), 0);
}
const pct = (xs: number[], p: number) => {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]!;
};

/** One measured window of a run. */
interface Window {
  seconds: number;
  routes: Map<string, number[]>;
  errors: number;
  /** 503s: no host could take a box. */
  refused: number;
  dispatch: number[];
  /** A job created → its agent holds it, ms. */
  claim: number[];
  /** Cores used during the window, on average. */
  cpu: { generator: number; replicas: number; postgres: number; machine: number };
  /**
   * How late the generator's own event loop ran (p99 and max, ms): every latency above is
   * read on it, so a late loop inflates them all by up to this much.
   */
  generatorLag: { p99: number; max: number };
  /**
   * How late each replica's event loop ran (p99 and max, ms, the worst replica's; prom-client's
   * default metrics on /metrics, at its 10 ms resolution): a claim woken on a late loop waits.
   */
  replicaLag: { p99: number; max: number };
}

interface RunResult {
  replicas: number;
  saturated: Window;
  paced: Window;
}

async function run(replicaCount: number): Promise<RunResult> {
  const db = await freshPostgresDatabase();
  // Limits are for people; the bench's users are many and fast on purpose.
  const limits = {
    boxQuotaPerUser: 1000,
    boxCreatesPerMinute: 100_000,
    authRateLimitPerMinute: 100_000,
    metricsToken: randomBytes(24).toString("hex"),
  };
  const replicas: ReplicaProcess[] = [];
  try {
    for (let i = 0; i < replicaCount; i++) {
      const r = await ReplicaProcess.prepare(db.url, await freePort(), limits);
      replicas.push(r);
      await r.start(); // one after another: the first applies the migrations
    }
    const urls = replicas.map((r) => r.url);
    const admin = await signedInAdmin(urls[0]!);

    // The window being measured (null between windows) and the users' think time now.
    let window: Window | null = null;
    let thinkMs = THINK_MS;
    let running = true;
    const timed = async <T extends { status: number }>(route: string, call: () => Promise<T>): Promise<T> => {
      const t0 = now();
      const res = await call();
      if (window) {
        const list = window.routes.get(route) ?? [];
        list.push(now() - t0);
        window.routes.set(route, list);
        if (res.status === 503 || res.status === 429) window.refused++;
        else if (res.status >= 500) window.errors++;
      }
      return res;
    };
    const reports: Promise<void>[] = [];
    // Claim latency: a job's creation (its createdAt, which its user's answer carries) → the
    // agent holds it (wall clock, one machine). Whichever of the two is known first waits here.
    const created = new Map<string, number>();
    const held = new Map<string, number>();
    const claimed = (id: string, createdMs: number, heldMs: number) => {
      created.delete(id);
      held.delete(id);
      window?.claim.push(Math.max(0, heldMs - createdMs));
    };
    const heldAt = (id: string, ms: number) => {
      const c = created.get(id);
      if (c === undefined) held.set(id, ms);
      else claimed(id, c, ms);
    };
    const createdAt = (job: { id: string; createdAt: string } | undefined) => {
      if (!job) return;
      const h = held.get(job.id);
      if (h === undefined) created.set(job.id, Date.parse(job.createdAt));
      else claimed(job.id, Date.parse(job.createdAt), h);
    };
    /** When each user's request that queues a job was sent, by `slug:action`. */
    const sentAt = new Map<string, number>();

    // Agents: one registered server each, spread over the replicas.
    const agentClients: TestClient[] = [];
    for (let k = 0; k < AGENTS; k++) {
      const agent = await registerServer(admin, `load-${k}`, {
        capacity: { vcpu: 4096, memoryMb: 64 * 1024 * 1024, diskGb: 1_000_000 },
      });
      agentClients.push(agent.at(urls[k % urls.length]!));
    }
    const connections = agentClients.map(() => new AgentConnections());
    await Promise.all(agentClients.map((a) => a.post("/agent/v1/heartbeat", heartbeat())));
    // As the agent's own loops do (loops/heartbeat.ts, loops/claim.ts): heartbeats go out on
    // their own schedule, each agent at its own phase (agents start independently), and never
    // hold up the next claim.
    const stopped = new AbortController();
    setMaxListeners(AGENTS + 1, stopped.signal); // each agent's heartbeat loop waits on it
    const heartbeatLoop = async (agent: TestClient, k: number) => {
      await sleep(Math.random() * HEARTBEAT_MS, stopped.signal);
      while (running) {
        await connections[k]!.send(() =>
          timed("POST /agent/v1/heartbeat", () => agent.post("/agent/v1/heartbeat", heartbeat())),
        );
        await sleep(HEARTBEAT_MS, stopped.signal);
      }
    };
    const agentLoop = async (agent: TestClient, k: number) => {
      let ip = 0;
      while (running) {
        const res = await agent.post("/agent/v1/jobs/claim", { max: 4, waitMs: 5_000 });
        const arrived = now();
        const jobs: Array<{ id: string; box: string; action: string }> = res.body?.jobs ?? [];
        for (const job of jobs) {
          const sent = sentAt.get(`${job.box}:${job.action}`);
          if (sent !== undefined) window?.dispatch.push(arrived - sent);
          heldAt(job.id, Date.now());
        }
        // Like the agent's outbox (its claim loop never waits for its reports): the job's
        // events go out while this agent claims again.
        reports.push(
          (async () => {
            for (const job of jobs) {
              const data =
                job.action === "delete" ? {} : { ip: `10.${k % 250}.${(ip >> 8) & 255}.${ip++ & 255}` };
              const at = new Date().toISOString();
              const events = [
                { seq: 1, at, type: "started" },
                { seq: 2, at, type: "result", ok: true, data },
              ];
              await connections[k]!.send(() =>
                timed("POST /agent/v1/jobs/:id/events", () =>
                  agent.post(`/agent/v1/jobs/${job.id}/events`, { events }),
                ),
              );
            }
          })(),
        );
      }
    };

    // Users: signed up on alternating replicas, each works on its own boxes.
    // Ten sign-ups at a time: each is a deliberately slow scrypt hash.
    const users: TestClient[] = [];
    for (let u = 0; u < USERS; u += 10) {
      const batch = Array.from({ length: Math.min(10, USERS - u) }, (_, i) =>
        signedInClient(urls[(u + i) % urls.length]!, `load-${u + i}`),
      );
      users.push(...(await Promise.all(batch)));
    }
    const think = () =>
      thinkMs > 0 ? new Promise((r) => setTimeout(r, thinkMs * (0.5 + Math.random()))) : undefined;
    const userLoop = async (user: TestClient, u: number) => {
      // Users arrive over one think time, not all in the same millisecond.
      await new Promise((r) => setTimeout(r, Math.random() * thinkMs));
      let seq = 0;
      for (; running; await think()) {
        const list = await timed("GET /api/v1/boxes", () => user.get("/api/v1/boxes"));
        const mine: Array<{ slug: string; status: string }> = list.body?.boxes ?? [];
        if (mine.length < 2) {
          const name = `u${u}-${seq++}`;
          sentAt.set(`${name}:create`, now());
          const res = await timed("POST /api/v1/boxes", () =>
            user.post("/api/v1/boxes", { template: "minimal", name }),
          );
          createdAt(res.body?.job);
          continue;
        }
        const box = mine[Math.floor(Math.random() * mine.length)]!;
        const action =
          box.status === "running"
            ? "stop"
            : box.status === "stopped"
              ? Math.random() < 0.5
                ? "start"
                : "delete"
              : null;
        if (!action) {
          await timed("GET /api/v1/boxes/:slug", () => user.get(`/api/v1/boxes/${box.slug}`));
          continue;
        }
        sentAt.set(`${box.slug}:${action}`, now());
        const res =
          action === "delete"
            ? await timed("DELETE /api/v1/boxes/:slug", () => user.del(`/api/v1/boxes/${box.slug}`))
            : await timed(`POST /api/v1/boxes/:slug/${action}`, () =>
                user.post(`/api/v1/boxes/${box.slug}/${action}`),
              );
        createdAt(res.body?.job);
      }
    };

    // Sign-ups take minutes: heartbeat again so every host is fresh for placement.
    await Promise.all(agentClients.map((a) => a.post("/agent/v1/heartbeat", heartbeat())));
    const loops = [
      ...agentClients.map(agentLoop),
      ...agentClients.map(heartbeatLoop),
      ...users.map(userLoop),
    ];
    /** The worst replica's event-loop lag since the last scrape (p99, max; ms). */
    const replicasLag = async (): Promise<{ p99: number; max: number }> => {
      const lags = await Promise.all(
        urls.map(async (url) => {
          const res = await fetch(`${url}/metrics`, {
            headers: { authorization: `Bearer ${limits.metricsToken}` },
          });
          const text = await res.text();
          const read = (name: string) => 1000 * Number(new RegExp(`^${name} (\\S+)$`, "m").exec(text)?.[1]);
          return {
            p99: read("nodejs_eventloop_lag_p99_seconds"),
            max: read("nodejs_eventloop_lag_max_seconds"),
          };
        }),
      );
      return { p99: Math.max(...lags.map((l) => l.p99)), max: Math.max(...lags.map((l) => l.max)) };
    };
    /** Waits `warmupMs`, then measures SECONDS with the users thinking `think` ms between calls. */
    const measure = async (think: number, warmupMs: number): Promise<Window> => {
      thinkMs = think;
      await new Promise((r) => setTimeout(r, warmupMs));
      const w: Window = {
        seconds: 0,
        routes: new Map(),
        errors: 0,
        refused: 0,
        dispatch: [],
        claim: [],
        cpu: { generator: 0, replicas: 0, postgres: 0, machine: 0 },
        generatorLag: { p99: 0, max: 0 },
        replicaLag: { p99: 0, max: 0 },
      };
      await replicasLag(); // a scrape starts each replica's lag histogram afresh
      const lag = monitorEventLoopDelay({ resolution: 5 });
      lag.enable();
      window = w;
      const cpu0 = process.cpuUsage();
      const replicasCpu = cpuOf(replicas.map((r) => r.pid!));
      const postgresCpu = cpuOf(postgresPids());
      const busy0 = machineBusy();
      const t0 = now();
      await new Promise((r) => setTimeout(r, SECONDS * 1000));
      window = null;
      w.seconds = (now() - t0) / 1000;
      const cpu = process.cpuUsage(cpu0);
      w.cpu = {
        generator: (cpu.user + cpu.system) / 1e6 / w.seconds,
        replicas: replicasCpu() / w.seconds,
        postgres: postgresCpu() / w.seconds,
        machine: (machineBusy() - busy0) / w.seconds,
      };
      lag.disable();
      w.generatorLag = { p99: lag.percentile(99) / 1e6, max: lag.max / 1e6 };
      w.replicaLag = await replicasLag();
      return w;
    };
    // Paced first: the saturated window's backlog (queued requests and jobs) would spill
    // into it. Its warm-up spans the users' arrival (one think time) and the wave of their
    // second creates (each user's second call finds one box and makes another, up to 1.5
    // think times later): without it the window opened on that wave, and how much of the
    // wave fell inside decided how loaded the window was.
    const paced = await measure(THINK_MS, PACED_WARMUP_MS);
    // Then every user's last think (at most 1.5 think times) ends before the saturated window.
    const saturated = await measure(0, (THINK_MS * 3) / 2 + WARMUP_MS);
    running = false;
    stopped.abort();
    await Promise.all(loops);
    await Promise.all(reports);
    return { replicas: replicaCount, saturated, paced };
  } finally {
    for (const r of replicas) await r.remove();
    await db.drop();
  }
}

const results: RunResult[] = [];
for (const n of RUNS) {
  console.error(`running ${n} replica(s): ${AGENTS} agents, ${USERS} users, ${SECONDS} s…`);
  results.push(await run(n));
}

const total = (w: Window) => [...w.routes.values()].reduce((a, l) => a + l.length, 0);
const rps = (w: Window) => total(w) / w.seconds;
const ms = (x: number) => (Number.isNaN(x) ? "-" : `${x.toFixed(1)}`);
const col = (s: string, w = 24) => s.padEnd(w);

/** One window of every run, side by side. */
function table(title: string, pick: (r: RunResult) => Window): void {
  const windows = results.map(pick);
  const row = (label: string, cell: (w: Window) => string) =>
    console.log(col(label, 36) + windows.map((w) => col(cell(w))).join(""));
  console.log(`\n${title}`);
  console.log(col("", 36) + results.map((r) => col(`${r.replicas} replica(s)`)).join(""));
  row("requests/s (all routes below)", (w) => rps(w).toFixed(0));
  row("500 answers", (w) => String(w.errors));
  // 503: no capacity; 429: a host over its requests in progress (AGENT_MAX_IN_FLIGHT).
  row("503 / 429 answers", (w) => String(w.refused));
  const p50p99 = (l: number[]) => `${ms(pct(l, 50))} / ${ms(pct(l, 99))} ms (${l.length})`;
  row("claim p50/p99 (job created → held)", (w) => p50p99(w.claim));
  row("dispatch p50/p99 (call sent → held)", (w) => p50p99(w.dispatch));
  const names = [...new Set(windows.flatMap((w) => [...w.routes.keys()]))].sort();
  for (const name of names) row(`  ${name}`, (w) => p50p99(w.routes.get(name) ?? []));
  row("CPU, cores: replicas", (w) => w.cpu.replicas.toFixed(2));
  row("           PostgreSQL", (w) => w.cpu.postgres.toFixed(2));
  row("           load generator", (w) => w.cpu.generator.toFixed(2));
  row(`           whole machine (of ${availableParallelism()})`, (w) => w.cpu.machine.toFixed(2));
  row(
    "generator's event loop late p99/max",
    (w) => `${ms(w.generatorLag.p99)} / ${ms(w.generatorLag.max)} ms`,
  );
  row("replicas' event loop late p99/max", (w) => `${ms(w.replicaLag.p99)} / ${ms(w.replicaLag.max)} ms`);
}

console.log(
  `load: ${AGENTS} agents, ${USERS} users, each window ${SECONDS} s measured after a warm-up (paced: ${PACED_WARMUP_MS / 1000} s, its users' arrival and second creates + ${WARMUP_MS / 1000} s; saturated: their last think + ${WARMUP_MS / 1000} s), PostgreSQL, each replica its own process`,
);
table("saturated: each user's next call as soon as the last is answered", (r) => r.saturated);
table(`paced: each user thinks ${THINK_MS / 2}–${(THINK_MS * 3) / 2} ms between calls`, (r) => r.paced);
if (results.length >= 2) {
  const [one, two] = results;
  console.log(
    `\nratio (saturated): ${two!.replicas} replicas / ${one!.replicas} replica throughput = ${(rps(two!.saturated) / rps(one!.saturated)).toFixed(2)}x`,
  );
}
