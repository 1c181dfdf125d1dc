import { expect } from "vitest";
import type { Clock } from "../../src/context.ts";
import type { TestClient } from "./client.ts";
import type { TestControlPlane } from "./control-plane.ts";

/** A clock the test moves by hand; the control plane reads it through `ctx.clock`. */
export class TestClock implements Clock {
  private t: number;
  constructor(start: string | Date) {
    this.t = new Date(start).getTime();
  }
  now(): Date {
    return new Date(this.t);
  }
  set(at: string | Date): void {
    this.t = new Date(at).getTime();
  }
  advance(ms: number): void {
    this.t += ms;
  }
}

/** Puts `clock` in the running control plane; returns the function that puts the real one back. */
export function useClock(env: TestControlPlane, clock: Clock): () => void {
  const before = env.cp.ctx.clock;
  env.cp.ctx.clock = clock;
  return () => {
    env.cp.ctx.clock = before;
  };
}

export async function me(client: TestClient): Promise<{ id: string; email: string; teamId: string }> {
  const res = await client.get("/api/v1/me");
  expect(res.status).toBe(200);
  return { id: res.body.id, email: res.body.email, teamId: res.body.team.id };
}

export async function wallet(client: TestClient) {
  const res = await client.get("/api/v1/billing/wallet");
  expect(res.status).toBe(200);
  return res.body;
}

/** Completes the server's next pending job through the agent protocol, successfully. */
export async function finishNextJob(
  agent: TestClient,
): Promise<{ id: string; action: string; slug: string }> {
  const claim = await agent.post("/agent/v1/jobs/claim", { waitMs: 0 });
  expect(claim.status).toBe(200);
  const job = claim.body.jobs[0];
  expect(job).toBeDefined();
  const at = new Date().toISOString();
  const data = job.action === "delete" ? {} : { ip: "10.0.0.3" };
  const res = await agent.post(`/agent/v1/jobs/${job.id}/events`, {
    events: [
      { seq: 1, at, type: "started" },
      { seq: 2, at, type: "result", ok: true, data },
    ],
  });
  expect(res.status).toBe(200);
  return { id: job.id, action: job.action, slug: job.payload.slug };
}
