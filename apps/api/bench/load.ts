/**
 * Control-plane load: K simulated agents (HTTP clients speaking the agent protocol: heartbeat,
 * long-poll claim, job events) and U users (list, create, stop, start, delete, read their
 * boxes; no think time) against 1 and then 2 control-plane replicas, each its own process,
 * on one fresh PostgreSQL database per run. Prints throughput, p50/p99 per route and the
 * dispatch latency (a user's create or action sent → the agent holds the job), side by side.
 *
 *   export TEST_DATABASE_URL=$(scripts/postgres.sh start)
 *   npm run bench:load [-- --agents 100 --users 200 --seconds 20 --replicas 1,2]
 *
 * The load generator is this one Node process. The CPU used during the measured window by it,
 * by the replicas, by PostgreSQL's processes and by the whole machine is printed too: on a
 * small machine they share the cores, and that caps what a second replica can add.
 */
import { readdirSync, readFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { parseArgs } from "node:util";
import { freePort } from "../../agent/test/support/agent-harness.ts";
import { heartbeat, registerServer, signedInClient, TestClient } from "../test/support/client.ts";
import {
  ADMIN_EMAIL,
  ADMIN_PASSWORD,
  freshPostgresDatabase,
  POSTGRES_URL,
} from "../test/support/control-plane.ts";
import { ReplicaProcess } from "../test/support/replica-process.ts";

const { values } = parseArgs({
  options: {
    agents: { type: "string", default: "100" },
    users: { type: "string", default: "200" },
    seconds: { type: "string", default: "20" },
    replicas: { type: "string", default: "1,2" },
  },
});
const AGENTS = Number(values.agents);
const USERS = Number(values.users);
const SECONDS = Number(values.seconds);
const WARMUP_MS = 3_000;
const RUNS = values.replicas.split(",").map(Number);
if (!POSTGRES_URL) {
  console.error("bench:load needs PostgreSQL: export TEST_DATABASE_URL=$(scripts/postgres.sh start)");
  process.exit(2);
}

const now = () => performance.now();

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

interface RunResult {
  replicas: number;
  seconds: number;
  routes: Map<string, number[]>;
  errors: number;
  /** 503s: no host could take a box. */
  refused: number;
  dispatch: number[];
  /** Cores used during the window, on average. */
  cpu: { generator: number; replicas: number; postgres: number; machine: number };
}

async function run(replicaCount: number): Promise<RunResult> {
  const db = await freshPostgresDatabase();
  // Limits are for people; the bench's users are many and fast on purpose.
  const limits = { boxQuotaPerUser: 1000, boxCreatesPerMinute: 100_000, authRateLimitPerMinute: 100_000 };
  const replicas: ReplicaProcess[] = [];
  try {
    for (let i = 0; i < replicaCount; i++) {
      const r = await ReplicaProcess.prepare(db.url, await freePort(), limits);
      replicas.push(r);
      await r.start(); // one after another: the first applies the migrations
    }
    const urls = replicas.map((r) => r.url);
    const admin = new TestClient(urls[0]!);
    const login = await admin.post("/api/v1/auth/login", { email: ADMIN_EMAIL, password: ADMIN_PASSWORD });
    if (login.status !== 200) throw new Error(`admin login: ${login.status}`);

    const routes = new Map<string, number[]>();
    const dispatch: number[] = [];
    let errors = 0;
    let refused = 0;
    let measuring = false;
    let running = true;
    const timed = async <T extends { status: number }>(route: string, call: () => Promise<T>): Promise<T> => {
      const t0 = now();
      const res = await call();
      if (measuring) {
        const list = routes.get(route) ?? [];
        list.push(now() - t0);
        routes.set(route, list);
        if (res.status === 503) refused++;
        else if (res.status >= 500) errors++;
      }
      return res;
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
    await Promise.all(agentClients.map((a) => a.post("/agent/v1/heartbeat", heartbeat())));
    const agentLoop = async (agent: TestClient, k: number) => {
      let lastBeat = now();
      let ip = 0;
      while (running) {
        if (now() - lastBeat > 10_000) {
          lastBeat = now();
          await timed("POST /agent/v1/heartbeat", () => agent.post("/agent/v1/heartbeat", heartbeat()));
        }
        const res = await agent.post("/agent/v1/jobs/claim", { max: 4, waitMs: 5_000 });
        const arrived = now();
        for (const job of res.body?.jobs ?? []) {
          const sent = sentAt.get(`${job.box}:${job.action}`);
          if (sent !== undefined && measuring) dispatch.push(arrived - sent);
          const data =
            job.action === "delete" ? {} : { ip: `10.${k % 250}.${(ip >> 8) & 255}.${ip++ & 255}` };
          const at = new Date().toISOString();
          const events = [
            { seq: 1, at, type: "started" },
            { seq: 2, at, type: "result", ok: true, data },
          ];
          await timed("POST /agent/v1/jobs/:id/events", () =>
            agent.post(`/agent/v1/jobs/${job.id}/events`, { events }),
          );
        }
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
    const userLoop = async (user: TestClient, u: number) => {
      let seq = 0;
      while (running) {
        const list = await timed("GET /api/v1/boxes", () => user.get("/api/v1/boxes"));
        const mine: Array<{ slug: string; status: string }> = list.body?.boxes ?? [];
        if (mine.length < 2) {
          const name = `u${u}-${seq++}`;
          sentAt.set(`${name}:create`, now());
          await timed("POST /api/v1/boxes", () => user.post("/api/v1/boxes", { template: "minimal", name }));
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
        if (action === "delete") {
          await timed("DELETE /api/v1/boxes/:slug", () => user.del(`/api/v1/boxes/${box.slug}`));
        } else {
          await timed(`POST /api/v1/boxes/:slug/${action}`, () =>
            user.post(`/api/v1/boxes/${box.slug}/${action}`),
          );
        }
      }
    };

    // Sign-ups take minutes: heartbeat again so every host is fresh for placement.
    await Promise.all(agentClients.map((a) => a.post("/agent/v1/heartbeat", heartbeat())));
    const loops = [...agentClients.map(agentLoop), ...users.map(userLoop)];
    await new Promise((r) => setTimeout(r, WARMUP_MS));
    measuring = true;
    const cpu0 = process.cpuUsage();
    const replicasCpu = cpuOf(replicas.map((r) => r.pid!));
    const postgresCpu = cpuOf(postgresPids());
    const busy0 = machineBusy();
    const t0 = now();
    await new Promise((r) => setTimeout(r, SECONDS * 1000));
    measuring = false;
    const elapsed = (now() - t0) / 1000;
    const cpu = process.cpuUsage(cpu0);
    const used = {
      generator: (cpu.user + cpu.system) / 1e6 / elapsed,
      replicas: replicasCpu() / elapsed,
      postgres: postgresCpu() / elapsed,
      machine: (machineBusy() - busy0) / elapsed,
    };
    running = false;
    await Promise.all(loops);
    return {
      replicas: replicaCount,
      seconds: elapsed,
      routes,
      errors,
      refused,
      dispatch,
      cpu: used,
    };
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

const total = (r: RunResult) => [...r.routes.values()].reduce((a, l) => a + l.length, 0);
const rps = (r: RunResult) => total(r) / r.seconds;
const ms = (x: number) => (Number.isNaN(x) ? "-" : `${x.toFixed(1)}`);
const col = (s: string, w = 24) => s.padEnd(w);
console.log(
  `load: ${AGENTS} agents, ${USERS} users, ${SECONDS} s measured after ${WARMUP_MS / 1000} s warm-up, PostgreSQL, each replica its own process`,
);
console.log(col("", 36) + results.map((r) => col(`${r.replicas} replica(s)`)).join(""));
console.log(col("requests/s (all routes below)", 36) + results.map((r) => col(rps(r).toFixed(0))).join(""));
console.log(col("500 answers", 36) + results.map((r) => col(String(r.errors))).join(""));
console.log(col("503 answers (no capacity)", 36) + results.map((r) => col(String(r.refused))).join(""));
console.log(
  col("dispatch p50/p99 ms (n)", 36) +
    results
      .map((r) => col(`${ms(pct(r.dispatch, 50))} / ${ms(pct(r.dispatch, 99))} (${r.dispatch.length})`))
      .join(""),
);
const names = [...new Set(results.flatMap((r) => [...r.routes.keys()]))].sort();
for (const name of names) {
  console.log(
    col(`  ${name}`, 36) +
      results
        .map((r) => {
          const l = r.routes.get(name) ?? [];
          return col(`${ms(pct(l, 50))} / ${ms(pct(l, 99))} ms (${l.length})`);
        })
        .join(""),
  );
}
const cores = (pick: (r: RunResult) => number) => results.map((r) => col(pick(r).toFixed(2))).join("");
console.log(col("CPU, cores: replicas", 36) + cores((r) => r.cpu.replicas));
console.log(col("           PostgreSQL", 36) + cores((r) => r.cpu.postgres));
console.log(col("           load generator", 36) + cores((r) => r.cpu.generator));
console.log(col(`           whole machine (of ${availableParallelism()})`, 36) + cores((r) => r.cpu.machine));
if (results.length >= 2) {
  const [one, two] = results;
  console.log(
    `ratio: ${two!.replicas} replicas / ${one!.replicas} replica throughput = ${(rps(two!) / rps(one!)).toFixed(2)}x`,
  );
}
