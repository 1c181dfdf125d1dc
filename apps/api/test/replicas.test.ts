import { randomUUID } from "node:crypto";
import { sql as dbSql } from "drizzle-orm";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { toTask } from "../src/ansible/views.ts";
import { PgBus } from "../src/realtime/pg-bus.ts";
import { reapTick } from "../src/services/periodic.ts";
import { heartbeat, registerServer, signedInClient, TestClient } from "./support/client.ts";
import {
  dbUnavailable,
  freshPostgresDatabase,
  startControlPlane,
  type TestControlPlane,
} from "./support/control-plane.ts";
import { SseReader } from "./support/sse.ts";

const at = () => new Date().toISOString();
/** Small limits, the same on both replicas: each replica alone would allow them again. */
const LIMITS = { authRateLimitPerMinute: 5, boxCreatesPerMinute: 4 };
const why = dbUnavailable("postgres");
if (why) console.warn(`SKIPPING control-plane replicas: ${why}`);

/** The PostgreSQL bus of a replica (on PostgreSQL every replica has one). */
function busOf(replica: TestControlPlane): PgBus {
  const bus = replica.cp.ctx.bus;
  if (!(bus instanceof PgBus)) throw new Error("a replica on PostgreSQL must use the PostgreSQL bus");
  return bus;
}

/**
 * Two control planes (A and B), each its own Fastify server on its own port with its own
 * pool and LISTEN connection, on ONE real PostgreSQL database: what one replica commits,
 * the other's streams and long-polls must see.
 */
describe.skipIf(why !== null)("control-plane replicas on one PostgreSQL", () => {
  let db: Awaited<ReturnType<typeof freshPostgresDatabase>>;
  let a: TestControlPlane;
  let b: TestControlPlane;
  let ownerA: TestClient;
  let ownerB: TestClient;
  let agentA: TestClient;
  let agentB: TestClient;
  let adminA: TestClient;
  let n = 0;
  const readers: SseReader[] = [];
  const follow = async (client: TestClient, path: string) => {
    const reader = new SseReader(await client.open(path));
    readers.push(reader);
    return reader;
  };

  beforeAll(async () => {
    db = await freshPostgresDatabase();
    a = await startControlPlane({ kind: "postgres", databaseUrl: db.url, config: LIMITS });
    // B waits 3 s before reopening a lost LISTEN connection, so the test can commit through
    // A while B is deaf and then see B catch up.
    b = await startControlPlane({
      kind: "postgres",
      databaseUrl: db.url,
      config: { ...LIMITS, busReconnectMs: 3_000 },
    });
    const admin = await a.admin();
    adminA = admin;
    agentA = await registerServer(admin, "replica-host");
    expect((await agentA.post("/agent/v1/heartbeat", heartbeat())).status).toBe(200);
    agentB = agentA.at(b.url);
    ownerA = await signedInClient(a.url, "replicas");
    ownerB = ownerA.at(b.url);
  });

  afterAll(async () => {
    // Streams a failed test left open would hold the replicas' close.
    await Promise.all(readers.map((r) => r.close()));
    await b?.close();
    await a?.close();
    await db?.drop();
  });

  /** A box created on A, by the test's owner unless said (boxCreatesPerMinute is per user). */
  async function createThroughA(owner = ownerA): Promise<{ slug: string; jobId: string }> {
    const res = await owner.post("/api/v1/boxes", { template: "minimal", name: `rep-${n++}` });
    expect(res.status).toBe(202);
    return { slug: res.body.box.slug, jobId: res.body.job.id };
  }

  it("takes a session made on A on B, and signing out on B ends it on A", async () => {
    const someone = await signedInClient(a.url, "replica-session");
    expect((await someone.at(b.url).get("/api/v1/me")).status).toBe(200);
    expect((await someone.at(b.url).post("/api/v1/auth/logout")).status).toBe(204);
    expect((await someone.get("/api/v1/me")).status).toBe(401);
  });

  it("carries a box, its job and its log from A to SSE clients and a long-polling agent on B", async () => {
    const events = await follow(ownerB, "/api/v1/events");
    // The agent waits on B; the box is created on A: only the bus can wake it before its wait ends.
    const started = Date.now();
    const claim = agentB.post("/agent/v1/jobs/claim", { waitMs: 20_000 });
    await new Promise((r) => setTimeout(r, 300)); // let B's claim find nothing and start waiting
    const { slug, jobId } = await createThroughA();
    const claimed = await claim;
    expect(claimed.body.jobs.map((j: { id: string }) => j.id)).toEqual([jobId]);
    expect(Date.now() - started).toBeLessThan(15_000); // woken, not timed out

    expect(await events.waitFor((f) => f.event === "box" && (f.data as any).slug === slug)).toMatchObject({
      slug,
    });
    const done = [
      { seq: 1, at: at(), type: "started" },
      { seq: 2, at: at(), type: "result", ok: true, data: { ip: "10.0.0.7" } },
    ];
    expect((await agentA.post(`/agent/v1/jobs/${jobId}/events`, { events: done })).status).toBe(200);
    await events.waitFor(
      (f) => f.event === "job" && (f.data as any).id === jobId && (f.data as any).status === "succeeded",
    );
    await events.waitFor(
      (f) => f.event === "box" && (f.data as any).slug === slug && (f.data as any).status === "running",
    );

    const logs = await follow(ownerB, `/api/v1/boxes/${slug}/logs/stream`);
    const lines = [{ offset: 0, at: at(), source: "console", text: "from replica A" }];
    expect((await agentA.post(`/agent/v1/boxes/${slug}/logs`, { epoch: 1, end: 15, lines })).status).toBe(
      200,
    );
    const got = await logs.waitFor((f) => f.event === "lines");
    expect(got.lines.map((l: { text: string }) => l.text)).toEqual(["from replica A"]);
    await Promise.all([events.close(), logs.close()]);
  });

  // The bus-note tests share one owner (sign-ups and creates are limited per minute) and one
  // box, whose job they end by hand, so no job of theirs is left for the tests after them.
  let noteOwner: TestClient;
  let noteBox: string;

  it("tells B of a box's and a job's change that no replica lived to announce", async () => {
    noteOwner = await signedInClient(a.url, "replica-notes");
    const { slug, jobId } = await createThroughA(noteOwner);
    noteBox = slug;
    const events = await follow(noteOwner.at(b.url), "/api/v1/events");
    // Another team's stream on B: the database's notes must not carry the box to it.
    const stranger = await follow(ownerB, "/api/v1/events");
    // Committed by a connection that publishes nothing, as when a replica is killed between
    // its commit and its own notification: the database's note is all B can hear.
    const bare = new pg.Client({ connectionString: db.url });
    await bare.connect();
    try {
      await bare.query("update agent_jobs set status = 'failed', error = 'by hand' where id = $1", [jobId]);
      await bare.query("update boxes set status = 'error', updated_at = now() where slug = $1", [slug]);
    } finally {
      await bare.end();
    }
    await events.waitFor(
      (f) => f.event === "job" && (f.data as any).id === jobId && (f.data as any).status === "failed",
    );
    await events.waitFor(
      (f) => f.event === "box" && (f.data as any).slug === slug && (f.data as any).status === "error",
    );
    expect(
      stranger.frames.filter((f) => (f.data as any)?.slug === slug || (f.data as any)?.id === jobId),
    ).toEqual([]);
    await Promise.all([events.close(), stranger.close()]);
  });

  it("sends box notes that replicas of the version before read too (team, id and slug)", async () => {
    const listener = new pg.Client({ connectionString: db.url });
    await listener.connect();
    try {
      const notes: Array<Record<string, unknown>> = [];
      listener.on("notification", (n) => notes.push(JSON.parse(n.payload!)));
      await listener.query("LISTEN doppio_bus");
      const res = await noteOwner.request("PATCH", `/api/v1/boxes/${noteBox}/idle`, {
        idleTimeoutMinutes: 30,
      });
      expect(res.status).toBe(200);
      await expect
        .poll(() => notes.find((n) => n.k === "box"))
        .toMatchObject({
          r: expect.stringMatching(/^doppio-api /),
          team: expect.any(String),
          id: expect.any(String),
          slug: noteBox,
        });
    } finally {
      await listener.end();
    }
  });

  it("hands A's stream its own change once, and B's the same box", async () => {
    // The owner's idle default is part of the box's view: B must read it too.
    expect((await noteOwner.request("PATCH", "/api/v1/me/idle", { idleTimeoutMinutes: 45 })).status).toBe(
      200,
    );
    const onA = await follow(noteOwner, "/api/v1/events");
    const onB = await follow(noteOwner.at(b.url), "/api/v1/events");
    // Notes of the tests before (the database's, which A hears too) may still be on their way
    // to either replica, and a late one reloads the box as it is by then. A wallet note carries
    // its own data, and each replica passes a team's notes on in the order it hears them: once
    // this one is on both streams, every note sent before it is behind.
    const bare = new pg.Client({ connectionString: db.url });
    await bare.connect();
    try {
      const { rows } = await bare.query("select team_id from boxes where slug = $1", [noteBox]);
      const wallet = { balance: 0, state: "low", message: "fence" };
      await bare.query("select pg_notify('doppio_bus', $1)", [
        JSON.stringify({ r: "test", k: "wallet", team: rows[0].team_id, wallet }),
      ]);
    } finally {
      await bare.end();
    }
    const fence = (f: { event: string; data: unknown }) =>
      f.event === "wallet" && (f.data as any).message === "fence";
    await Promise.all([onA.waitFor(fence), onB.waitFor(fence)]);
    const [fromA, fromB] = [onA.frames.length, onB.frames.length];

    const res = await noteOwner.request("PATCH", `/api/v1/boxes/${noteBox}/idle`, {
      idleTimeoutMinutes: null,
    });
    expect(res.status).toBe(200);
    const changed = (f: { event: string; data: unknown }) =>
      f.event === "box" && (f.data as any).slug === noteBox;
    await onB.waitFor((f) => changed(f) && (f.data as any).idleTimeoutMinutes === 45); // the note reached B
    await new Promise((r) => setTimeout(r, 500)); // time for a reload A must not do
    const [seenA, seenB] = [onA.frames.slice(fromA).filter(changed), onB.frames.slice(fromB).filter(changed)];
    expect(seenA).toHaveLength(1);
    expect(seenB).toHaveLength(1);
    expect(seenB[0]!.data).toMatchObject({ idleTimeoutMinutes: 45 });
    expect(seenB[0]!.data).toEqual(seenA[0]!.data);
    await Promise.all([onA.close(), onB.close()]);
  });

  it("misses nothing while B's LISTEN connection is killed and comes back", async () => {
    const { slug: logged, jobId: first } = await createThroughA();
    const ok = (seq: number) => ({ seq, at: at(), type: "result", ok: true, data: { ip: "10.0.0.8" } });
    await agentA.post("/agent/v1/jobs/claim", { waitMs: 0 });
    await agentA.post(`/agent/v1/jobs/${first}/events`, { events: [ok(1)] });

    const events = await follow(ownerB, "/api/v1/events");
    const logs = await follow(ownerB, `/api/v1/boxes/${logged}/logs/stream`);
    const claim = agentB.post("/agent/v1/jobs/claim", { waitMs: 20_000 });
    await new Promise((r) => setTimeout(r, 300));

    const bus = busOf(b);
    const before = bus.listenerState();
    expect(before.connected).toBe(true);
    const killer = new pg.Client({ connectionString: db.url });
    await killer.connect();
    const killed = await killer.query("select pg_terminate_backend($1) as ok", [before.pid]);
    await killer.end();
    expect(killed.rows[0].ok).toBe(true);
    await expect.poll(() => bus.listenerState().connected).toBe(false);

    // Committed through A while B hears nothing: a new box (and its job), a log line.
    const { slug, jobId } = await createThroughA();
    const line = [{ offset: 0, at: at(), source: "console", text: "said while B was deaf" }];
    expect(
      (await agentA.post(`/agent/v1/boxes/${logged}/logs`, { epoch: 1, end: 22, lines: line })).status,
    ).toBe(200);
    // Still deaf: what follows proves the catch-up read, not a notification.
    expect(bus.listenerState().connected).toBe(false);

    const claimed = await claim;
    expect(claimed.body.jobs.map((j: { id: string }) => j.id)).toEqual([jobId]);
    await events.waitFor((f) => f.event === "box" && (f.data as any).slug === slug);
    await events.waitFor((f) => f.event === "job" && (f.data as any).id === jobId);
    const got = await logs.waitFor((f) => f.event === "lines");
    expect(got.lines.map((l: { text: string }) => l.text)).toEqual(["said while B was deaf"]);
    const after = bus.listenerState();
    expect(after.reconnects).toBe(before.reconnects + 1);
    expect(after.pid).not.toBe(before.pid);

    // And it listens again: the next change arrives as a notification.
    await agentA.post(`/agent/v1/jobs/${jobId}/events`, { events: [ok(1)] });
    await events.waitFor(
      (f) => f.event === "box" && (f.data as any).slug === slug && (f.data as any).status === "running",
    );
    await Promise.all([events.close(), logs.close()]);
  });

  it("carries an Ansible play's tasks and status from the replica running it to a stream on B, across a lost listener", async () => {
    // A play as the runner on A keeps it: rows in the database, each change published on A's bus.
    const sql = new pg.Client({ connectionString: db.url });
    sql.on("error", () => {}); // a later test ends every connection; this one is done by then
    await sql.connect();
    const playId = randomUUID();
    await sql.query(
      `insert into ansible_plays (id, server_id, playbook, status, variables, started_at)
         select $1, id, 'prepare', 'running', '{}'::jsonb, now() from servers where name = 'replica-host'`,
      [playId],
    );
    for (const [i, task] of ["t-one", "t-two"].entries()) {
      await sql.query(
        "insert into ansible_tasks (play_id, task_id, position, name) values ($1, $2, $3, $4)",
        [playId, task, (i + 1) * 1000, `task ${task}`],
      );
    }
    const runnerOnA = async (taskId: string, status: string, playStatus?: string) => {
      const { rows } = await sql.query(
        "update ansible_tasks set status = $3, ended_at = now() where play_id = $1 and task_id = $2 returning *",
        [playId, taskId, status],
      );
      const r = rows[0];
      a.cp.ctx.bus.publishPlay(playId, {
        type: "task",
        task: toTask({
          playId: r.play_id,
          taskId: r.task_id,
          position: r.position,
          name: r.name,
          role: r.role,
          handler: r.handler,
          status: r.status,
          startedAt: r.started_at,
          endedAt: r.ended_at,
          output: r.output,
          error: r.error,
        }),
      });
      if (playStatus) {
        await sql.query("update ansible_plays set status = $2, ended_at = now() where id = $1", [
          playId,
          playStatus,
        ]);
        const play = (await adminA.get(`/api/v1/plays/${playId}`)).body;
        const { tasks: _tasks, ...view } = play;
        a.cp.ctx.bus.publishPlay(playId, { type: "play", play: view });
      }
    };

    const adminB = adminA.at(b.url);
    const stream = await follow(adminB, `/api/v1/plays/${playId}/stream`);
    await stream.waitFor((f) => f.event === "play" && (f.data as any).status === "running");

    // Live: A's change reaches B's stream through a notification (B loads the task row).
    await runnerOnA("t-one", "ok");
    const one = await stream.waitFor(
      (f) => f.event === "task" && (f.data as any).id === "t-one" && (f.data as any).status !== "pending",
    );
    expect(one).toMatchObject({ status: "ok", name: "task t-one" });

    // B deaf: the last task and the end of the play arrive by B's catch-up read.
    const bus = busOf(b);
    const killer = new pg.Client({ connectionString: db.url });
    await killer.connect();
    await killer.query("select pg_terminate_backend($1)", [bus.listenerState().pid]);
    await killer.end();
    await expect.poll(() => bus.listenerState().connected).toBe(false);
    await runnerOnA("t-two", "failed", "failure");
    expect(bus.listenerState().connected).toBe(false);
    const two = await stream.waitFor(
      (f) => f.event === "task" && (f.data as any).id === "t-two" && (f.data as any).status !== "pending",
    );
    expect(two).toMatchObject({ status: "failed" });
    const end = await stream.waitFor((f) => f.event === "play" && (f.data as any).status === "failure");
    expect(end.progress).toEqual({ done: 2, total: 2 });
    await sql.end();
    await stream.close();
  });

  it("keeps answering after PostgreSQL ends its idle pooled connections (a restart, a failover)", async () => {
    expect((await ownerB.get("/api/v1/boxes")).status).toBe(200);
    const killer = new pg.Client({ connectionString: db.url });
    await killer.connect();
    const { rows } = await killer.query(
      `select pg_terminate_backend(pid) as ok from pg_stat_activity
        where datname = current_database() and pid <> pg_backend_pid() and pid <> $1`,
      [busOf(b).listenerState().pid],
    );
    await killer.end();
    // Both replicas' pools had idle connections; an unhandled pool error would end the run here.
    expect(rows.length).toBeGreaterThan(1);
    await expect.poll(async () => (await ownerB.get("/api/v1/boxes")).status).toBe(200);
    expect((await ownerA.get("/api/v1/boxes")).status).toBe(200);
  });

  it("survives PostgreSQL ending a connection that is checked out between two queries", async () => {
    const killer = new pg.Client({ connectionString: db.url });
    await killer.connect();
    const outcome = await a.cp.ctx.db
      .transaction(async (tx) => {
        await tx.execute(dbSql`select 1`);
        const { rows } = await killer.query(
          `select pg_terminate_backend(pid) as ok from pg_stat_activity
            where datname = current_database() and state = 'idle in transaction'`,
        );
        expect(rows).toEqual([{ ok: true }]);
        // The error reaches the client while no query of it runs (an unhandled 'error' event
        // here ended both replicas in the chaos run's PostgreSQL restart).
        await new Promise((r) => setTimeout(r, 500));
        await tx.execute(dbSql`select 1`);
        return "committed";
      })
      .catch((err: Error) => err.message);
    await killer.end();
    expect(outcome).not.toBe("committed");
    expect((await ownerA.get("/api/v1/boxes")).status).toBe(200);
  });

  it("runs work that must happen once on one replica at a time", async () => {
    let release = () => {};
    const gate = new Promise<void>((r) => {
      release = r;
    });
    let entered = () => {};
    const inside = new Promise<void>((r) => {
      entered = r;
    });
    const onA = a.cp.ctx.tasks.run("lease-reaper", async () => {
      entered();
      await gate;
      return "a";
    });
    await inside;
    // While A holds the reaper, B's ticks (the real reaper included) do nothing.
    expect(await b.cp.ctx.tasks.run("lease-reaper", async () => "b")).toEqual({ ran: false });
    expect(await reapTick(b.cp.ctx)).toEqual({ ran: false });
    // Another task is not blocked by it.
    expect(await b.cp.ctx.tasks.run("server-liveness", async () => "b")).toEqual({
      ran: true,
      value: "b",
    });
    release();
    expect(await onA).toEqual({ ran: true, value: "a" });
    expect(await reapTick(b.cp.ctx)).toMatchObject({ ran: true });
  });

  it("counts sign-in attempts and box creations across replicas", async () => {
    // One admin login so far from this address; four more wrong ones, alternating replicas.
    const anonymous = new TestClient(a.url);
    const statuses: number[] = [];
    for (let i = 0; i < 6; i++) {
      const client = i % 2 === 0 ? anonymous : anonymous.at(b.url);
      statuses.push(
        (await client.post("/api/v1/auth/login", { email: "nobody@example.com", password: "wrong password" }))
          .status,
      );
    }
    expect(statuses).toEqual([401, 401, 401, 401, 429, 429]);

    const creator = await signedInClient(a.url, "replica-rate");
    const creates: number[] = [];
    for (let i = 0; i < 6; i++) {
      const client = i % 2 === 0 ? creator : creator.at(b.url);
      creates.push((await client.post("/api/v1/boxes", { template: "minimal", name: `rate-${i}` })).status);
    }
    expect(creates.slice(0, 4)).not.toContain(429);
    expect(creates.slice(4)).toEqual([429, 429]);
  });
});
