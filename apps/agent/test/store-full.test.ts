import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import Database from "better-sqlite3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort } from "../../api/test/support/ports.ts";
import {
  API_TOKEN,
  boxJobs,
  startCp,
  type TestCp,
  waitFor,
  waitForBox,
  waitForHeartbeat,
} from "./support/agent-harness.ts";
import { AgentProcess } from "./support/agent-process.ts";
import { SmallFs, smallFsUnavailable } from "./support/small-fs.ts";

const why = smallFsUnavailable();
if (why) console.warn(`SKIPPING the agent store ENOSPC test: ${why}`);

/**
 * The agent process with its data dir (its SQLite store included) on a small tmpfs that the
 * test fills: the agent must keep running (no crash loop), say the store is full, keep the
 * jobs it was handed and finish them once there is room, with its database intact.
 */
describe.skipIf(why !== null)("the agent's SQLite store on a full disk", () => {
  let cp: TestCp;
  let dir: string;
  let fs: SmallFs | null = null;
  let proc: AgentProcess;
  let apiUrl: string;

  const storeFull = async () => {
    const res = await fetch(`${apiUrl}/metrics`, { headers: { authorization: `Bearer ${API_TOKEN}` } });
    return /^doppio_agent_store_full (\d)/m.exec(await res.text())?.[1] === "1";
  };

  beforeAll(async () => {
    // A job handed out but not stored (its claim met the full disk) goes back to pending
    // when its delivery lease ends: short here, so the test need not wait a minute.
    cp = await startCp("host-1", { deliveryLeaseMs: 5_000, reaperIntervalMs: 1_000 });
    // The lease reaper (started by the control plane's main, not by the test harness).
    cp.env.cp.startReaper();
    dir = await mkdtemp(path.join(tmpdir(), "doppio-storefull-"));
    fs = SmallFs.mount(path.join(dir, "data"), 8 * 1024 * 1024);
    const listen = `127.0.0.1:${await freePort()}`;
    apiUrl = `http://${listen}`;
    // Config, log and the fake host's state live outside the small filesystem: only the
    // agent's own data dir fills up.
    proc = await AgentProcess.prepare(
      dir,
      {
        controlPlaneUrl: cp.url,
        serverToken: cp.agentToken,
        dataDir: fs.dir,
        domain: "host-1.example.test",
        apiToken: API_TOKEN,
        listen,
        heartbeatIntervalMs: 500,
        claimWaitMs: 2_000,
        logLevel: "info",
      },
      { stepDelayMs: 200, stateFile: path.join(dir, "fake-host.json"), golden: { minimal: "ready" } },
    );
  });
  afterAll(async () => {
    await proc?.kill("SIGTERM");
    await cp?.close();
    if (fs) {
      fs.free();
      fs.unmount();
    }
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("keeps running and holds its jobs while the disk is full, then finishes them with nothing lost", async () => {
    proc.start();
    await waitForHeartbeat(cp);
    expect((await cp.admin.post("/api/v1/boxes", { template: "minimal", name: "before" })).status).toBe(202);
    await waitForBox(cp, "before", "running", 40_000);
    const pid = proc.pid;

    // Writes that fit in the WAL file's existing frames take no new space on the disk: empty
    // it first, so the jobs' writes must grow it on the full disk.
    const wal = new Database(path.join(fs!.dir, "agent.sqlite"));
    try {
      wal.pragma("wal_checkpoint(TRUNCATE)");
    } finally {
      wal.close();
    }
    fs!.fill();
    const names = ["full-1", "full-2", "full-3"];
    for (const name of names) {
      expect((await cp.admin.post("/api/v1/boxes", { template: "minimal", name })).status).toBe(202);
    }
    // The store says it is full (a job could not be recorded), and the agent lives on. (Whether
    // it still says so seconds later depends on what its own WAL checkpoints gave back.)
    await waitFor("the agent reports its store full", storeFull, 60_000, 250);
    await new Promise((r) => setTimeout(r, 5_000));
    expect(proc.pid).toBe(pid);
    process.kill(pid!, 0);

    fs!.free();
    // Every job accepted before finishes: succeeded, or failed saying the disk was full.
    for (const name of names) {
      const job = await waitFor(
        `${name}'s job to finish`,
        async () => {
          const [j] = await boxJobs(cp, name);
          return j.status === "succeeded" || j.status === "failed" ? j : null;
        },
        90_000,
        500,
      ).catch(async (err) => {
        console.log(JSON.stringify((await boxJobs(cp, name))[0]).slice(0, 1500));
        const log = (await import("node:fs")).readFileSync(path.join(dir, "agent.log"), "utf8").split("\n");
        console.log(
          log
            .filter((l) => /"level":[45]0|store|claim/.test(l))
            .map((l) => l.slice(0, 300))
            .join("\n"),
        );
        throw err;
      });
      expect(job.status === "succeeded" || job.errorCode === "disk_full", JSON.stringify(job)).toBe(true);
      console.log(
        `${name}: ${job.status}${job.errorCode ? ` (${job.errorCode})` : ""}, attempts logged: ${job.log.trim()}`,
      );
    }
    await waitFor("the store writes again", async () => !(await storeFull()), 30_000, 250);
    // And new work runs as before.
    expect((await cp.admin.post("/api/v1/boxes", { template: "minimal", name: "after" })).status).toBe(202);
    await waitForBox(cp, "after", "running", 40_000);
    expect(proc.pid).toBe(pid);

    // The agent's database: intact, every job it was handed recorded once and done.
    const db = new Database(path.join(fs!.dir, "agent.sqlite"), { readonly: true });
    try {
      expect(db.pragma("integrity_check", { simple: true })).toBe("ok");
      const rows = db.prepare("SELECT box, status FROM jobs WHERE local = 0 ORDER BY rowid").all() as Array<{
        box: string;
        status: string;
      }>;
      expect(rows.map((r) => r.box).sort()).toEqual(["after", "before", ...names].sort());
      expect(rows.every((r) => r.status === "done")).toBe(true);
    } finally {
      db.close();
    }
  }, 240_000);
});
