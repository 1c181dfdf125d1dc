import type { ClaimedJob, JobEvent, StepName } from "@doppio/contracts";
import { heartbeat, registerServer, type TestClient } from "../../../api/test/support/client.ts";

/**
 * The agent's side of the real agent protocol, driven one call at a time by the test, so
 * the test can look at the page between any two events (a step running, then finished).
 */
export class ManualAgent {
  private seqs = new Map<string, number>();
  /** Where each box's serial log file ends, as the agent's log follower tracks it. */
  private logEnds = new Map<string, number>();
  private ip = 2;

  private constructor(
    private readonly client: TestClient,
    readonly server: string,
  ) {}

  /** Registers a server as `admin` and heartbeats with the minimal template's golden ready. */
  static async register(admin: TestClient, name: string): Promise<ManualAgent> {
    const client = await registerServer(admin, name);
    const agent = new ManualAgent(client, name);
    await agent.heartbeat();
    return agent;
  }

  /** `extra`: more heartbeat fields (e.g. the warm pool's report); returns the control plane's answer. */
  async heartbeat(extra: Record<string, unknown> = {}): Promise<unknown> {
    return this.post("/agent/v1/heartbeat", heartbeat({ minimal: "ready" }, extra));
  }

  /** The next pending job; polls briefly because the API call that queued it may still be in flight. */
  async claim(timeoutMs = 10_000): Promise<ClaimedJob> {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      const { jobs } = (await this.post("/agent/v1/jobs/claim", { max: 1, waitMs: 0 })) as {
        jobs: ClaimedJob[];
      };
      if (jobs[0]) return jobs[0];
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error("no job to claim");
  }

  async send(job: ClaimedJob, event: Record<string, unknown>): Promise<void> {
    const seq = (this.seqs.get(job.id) ?? 0) + 1;
    this.seqs.set(job.id, seq);
    await this.post(`/agent/v1/jobs/${job.id}/events`, {
      events: [{ seq, at: new Date().toISOString(), ...event } as JobEvent],
    });
  }

  started = (job: ClaimedJob) => this.send(job, { type: "started" });
  step = (job: ClaimedJob, name: StepName, status: "running" | "succeeded" | "failed", detail?: string) =>
    this.send(job, { type: "step", name, status, ...(detail ? { detail } : {}) });
  succeed = (job: ClaimedJob) =>
    this.send(job, {
      type: "result",
      ok: true,
      data:
        job.action === "delete"
          ? {}
          : job.action === "hibernate"
            ? { ip: `10.0.0.${this.ip++}`, memoryFileBytes: 48 * 1024 * 1024 }
            : { ip: `10.0.0.${this.ip++}` },
    });

  /** Ships serial-log lines of a box on this server (each takes its UTF-8 length and a newline). */
  async logs(slug: string, lines: { source: string; text: string }[]): Promise<void> {
    let offset = this.logEnds.get(slug) ?? 0;
    const at = new Date().toISOString();
    const batch = lines.map((l) => {
      const line = { offset, at, source: l.source, text: l.text };
      offset += Buffer.byteLength(l.text) + 1;
      return line;
    });
    await this.post(`/agent/v1/boxes/${slug}/logs`, { epoch: 1, end: offset, lines: batch });
    this.logEnds.set(slug, offset);
  }

  /** Claims the next job and runs all of `steps` through to a successful result. */
  async runNext(steps: readonly StepName[]): Promise<ClaimedJob> {
    const job = await this.claim();
    await this.started(job);
    for (const s of steps) {
      await this.step(job, s, "running");
      await this.step(job, s, "succeeded");
    }
    await this.succeed(job);
    return job;
  }

  private async post(path: string, body: unknown): Promise<unknown> {
    const res = await this.client.post(path, body);
    if (res.status !== 200) throw new Error(`${path}: ${res.status} ${JSON.stringify(res.body)}`);
    return res.body;
  }
}
