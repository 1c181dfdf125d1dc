import type { ClaimedJob, JobAction, JobEvent, StepName } from "@doppio/contracts";
import { heartbeat, registerServer, type TestClient } from "../../../api/test/support/client.ts";

/** Steps the scripted agent reports per action; names come from the shared typed list. */
const STEPS: Record<JobAction, StepName[]> = {
  create: [
    "check_state",
    "allocate_ip",
    "prepare_disks",
    "setup_network",
    "restore_vm",
    "wait_ready",
    "add_routes",
  ],
  start: ["check_state", "setup_network", "restore_vm", "wait_ready", "add_routes"],
  stop: ["check_state", "remove_routes", "stop_vm", "teardown_network"],
  reset: ["check_state", "stop_vm", "prepare_disks", "restore_vm", "wait_ready", "add_routes"],
  delete: ["check_state", "remove_routes", "stop_vm", "teardown_network", "remove_disks", "release_ip"],
  hibernate: ["check_state", "remove_routes", "hibernate_vm", "teardown_network"],
  build_golden: ["build_rootfs", "snapshot_vm"],
  build_image: ["build_rootfs", "write_image"],
};

export interface ScriptedAgentOptions {
  /** Pause after each step starts, so a watcher can see it running. */
  stepDelayMs?: number;
  /** Return an error (its code and message) to make the job fail at its last step. */
  failWith?: (job: ClaimedJob) => { code: string; error: string } | null;
}

export interface ScriptedAgent {
  server: string;
  /** Ids of the jobs it finished, in order. */
  finished: string[];
  /** Protocol errors it met; a test expects none. */
  errors: unknown[];
  /** Ships serial-log lines of a box on this server, as the agent's log follower does. */
  pushLogs(slug: string, lines: { source: string; text: string }[]): Promise<void>;
  stop(): Promise<void>;
}

/**
 * Plays the agent's side of the real agent protocol against a real control plane:
 * registers a server (as `admin`), heartbeats with the golden snapshot ready, long-polls
 * `/agent/v1/jobs/claim` and reports started/step/result events for each job.
 */
export async function startScriptedAgent(
  admin: TestClient,
  name: string,
  opts: ScriptedAgentOptions = {},
): Promise<ScriptedAgent> {
  const agent = await registerServer(admin, name);
  const hb = await agent.post("/agent/v1/heartbeat", heartbeat({ minimal: "ready" }));
  if (hb.status !== 200) throw new Error(`heartbeat failed: ${hb.status} ${JSON.stringify(hb.body)}`);
  let stopped = false;
  const finished: string[] = [];
  const errors: unknown[] = [];
  let ipCounter = 2;

  const post = async (path: string, body: unknown) => {
    const res = await agent.post(path, body);
    if (res.status !== 200) throw new Error(`${path}: ${res.status} ${JSON.stringify(res.body)}`);
    return res.body;
  };

  const run = async (job: ClaimedJob) => {
    let seq = 0;
    const send = (event: Record<string, unknown>) =>
      post(`/agent/v1/jobs/${job.id}/events`, {
        events: [{ seq: ++seq, at: new Date().toISOString(), ...event } as JobEvent],
      });
    await send({ type: "started" });
    const steps = STEPS[job.action];
    const failure = opts.failWith?.(job) ?? null;
    for (const [i, step] of steps.entries()) {
      await send({ type: "step", name: step, status: "running" });
      if (opts.stepDelayMs) await new Promise((r) => setTimeout(r, opts.stepDelayMs));
      const fails = failure !== null && i === steps.length - 1;
      await send({
        type: "step",
        name: step,
        status: fails ? "failed" : "succeeded",
        detail: fails ? failure?.error : undefined,
      });
      if (fails) break;
    }
    await send(
      failure !== null
        ? { type: "result", ok: false, ...failure }
        : {
            type: "result",
            ok: true,
            data: job.action === "delete" ? {} : resultData(job.action, `10.0.0.${ipCounter++}`),
          },
    );
    finished.push(job.id);
  };

  // Short claim polls keep stop() quick; a real agent holds them open for longer.
  const loop = (async () => {
    let lastBeat = Date.now();
    while (!stopped) {
      try {
        // Heartbeats keep the server eligible for placement, as the real agent's do.
        if (Date.now() - lastBeat > 10_000) {
          await post("/agent/v1/heartbeat", heartbeat({ minimal: "ready" }));
          lastBeat = Date.now();
        }
        const { jobs } = (await post("/agent/v1/jobs/claim", { max: 4, waitMs: 500 })) as {
          jobs: ClaimedJob[];
        };
        for (const job of jobs) await run(job);
      } catch (err) {
        errors.push(err);
        await new Promise((r) => setTimeout(r, 200));
      }
    }
  })();

  // One serial log file per box; each line takes its UTF-8 length plus a newline.
  const logEnds = new Map<string, number>();
  const pushLogs = async (slug: string, lines: { source: string; text: string }[]) => {
    let offset = logEnds.get(slug) ?? 0;
    const at = new Date().toISOString();
    const batch = lines.map((l) => {
      const line = { offset, at, source: l.source, text: l.text };
      offset += Buffer.byteLength(l.text) + 1;
      return line;
    });
    await post(`/agent/v1/boxes/${slug}/logs`, { epoch: 1, end: offset, lines: batch });
    logEnds.set(slug, offset);
  };

  return {
    server: name,
    finished,
    errors,
    pushLogs,
    async stop() {
      stopped = true;
      await loop;
    },
  };
}

/** A box job's successful result as its action's contract has it (agent-protocol.ts). */
function resultData(action: JobAction, ip: string): Record<string, unknown> {
  // A 48 MiB memory file, as a small box's hibernation leaves.
  return action === "hibernate" ? { ip, memoryFileBytes: 48 * 1024 * 1024 } : { ip };
}
