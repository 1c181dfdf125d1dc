import {
  allowedActions,
  BOX_ACTIONS,
  type BoxAction,
  type BoxStatus,
  canPerform,
  IN_FLIGHT_STATUS,
  SETTLED_STATUS,
} from "@doppio/contracts";
import { describe, expect, it } from "vitest";
import { rng, runWorkload, type WorkloadClient } from "./workload.ts";

/**
 * The box API's rules as apps/api/src/services/boxes.ts applies them, in memory: an action
 * the status allows is queued (202) and its job settles the box a little later; the same
 * action already in flight answers 200 with that job; any other action while a job is in
 * flight, or one the status does not allow, is 409. Note that a `creating` box lists
 * `delete` among its allowed actions, yet a delete is refused while its create runs.
 */
class BoxApiStandIn implements WorkloadClient {
  readonly boxes = new Map<string, { status: BoxStatus; job: { id: string; action: BoxAction } | null }>();
  readonly refusals: string[] = [];
  #jobs = 0;
  readonly #random = rng(99);

  #queue(slug: string, action: BoxAction) {
    const box = this.boxes.get(slug)!;
    const job = { id: `job-${++this.#jobs}`, action };
    box.job = job;
    box.status = IN_FLIGHT_STATUS[action];
    setTimeout(
      () => {
        box.job = null;
        // A create on a full disk fails now and then: the box shows error.
        box.status = action === "create" && this.#random() < 0.1 ? "error" : SETTLED_STATUS[action];
        if (box.status === "deleted") this.boxes.delete(slug);
      },
      1 + Math.floor(this.#random() * 20),
    );
    return { status: 202, body: { job }, headers: new Headers() };
  }

  #refuse(why: string) {
    this.refusals.push(why);
    return { status: 409, body: { error: { code: "conflict", message: why } }, headers: new Headers() };
  }

  get = async (path: string) => {
    if (path === "/api/v1/boxes") {
      const boxes = [...this.boxes].map(([slug, b]) => ({
        slug,
        status: b.status,
        allowedActions: allowedActions(b.status),
      }));
      return { status: 200, body: { boxes }, headers: new Headers() };
    }
    const box = this.boxes.get(path.split("/").at(-1)!);
    return box
      ? {
          status: 200,
          body: { status: box.status, allowedActions: allowedActions(box.status) },
          headers: new Headers(),
        }
      : { status: 404, body: null, headers: new Headers() };
  };

  post = async (path: string, body?: unknown) => {
    if (path === "/api/v1/boxes") {
      const name = (body as { name: string }).name;
      if (this.boxes.has(name)) return this.#refuse(`a box named "${name}" already exists`);
      this.boxes.set(name, { status: "creating", job: null });
      return this.#queue(name, "create");
    }
    const [, , , , slug, action] = path.split("/");
    return this.#act(slug!, action as BoxAction);
  };

  del = async (path: string) => this.#act(path.split("/").at(-1)!, "delete");

  #act(slug: string, action: BoxAction) {
    const box = this.boxes.get(slug);
    if (!box) return { status: 404, body: null, headers: new Headers() };
    if (box.job?.action === action) return { status: 200, body: { job: box.job }, headers: new Headers() };
    if (box.job) return this.#refuse(`box "${slug}" already has a ${box.job.action} job in progress`);
    if (!canPerform(box.status, action))
      return this.#refuse(`cannot ${action} box "${slug}" while it is ${box.status}`);
    return this.#queue(slug, action);
  }
}

// The workload once counted refused requests as jobs and took a `creating` box (which lists
// `delete`) for a settled one: its deletes were refused, and `npm run chaos -- --jobs 200
// --seed 7` submitted 118 jobs and stopped.
describe("the chaos workload", () => {
  it("submits exactly the jobs asked for, each on a settled box, none refused", async () => {
    const api = new BoxApiStandIn();
    const seen: number[] = [];
    const submitted = await runWorkload(api, {
      total: 120,
      parallel: 4,
      random: rng(7 ^ 0x5eed),
      onSubmitted: async (n) => {
        seen.push(n);
      },
    });
    expect(api.refusals).toEqual([]);
    expect(submitted).toHaveLength(120);
    expect(new Set(submitted.map((s) => s.jobId)).size).toBe(120);
    expect(seen).toEqual(Array.from({ length: 120 }, (_, i) => i + 1));
    // A real mix, not only creates.
    const actions = new Set(submitted.map((s) => s.action));
    for (const a of BOX_ACTIONS) expect(actions, a).toContain(a);
  });

  // After a PostgreSQL restart a replica once left the workload's requests unanswered for
  // minutes, and the workload, waiting on one of them, could neither go on nor give up.
  it("sends a request again when it goes unanswered", async () => {
    const api = new BoxApiStandIn();
    const never = new Promise<never>(() => {});
    let hung = 0;
    const hanging: WorkloadClient = {
      // Every 5th request never gets an answer.
      get: (path) => (++hung % 5 === 0 ? never : api.get(path)),
      post: (path, body) => (++hung % 5 === 0 ? never : api.post(path, body)),
      del: (path) => (++hung % 5 === 0 ? never : api.del(path)),
    };
    const submitted = await runWorkload(hanging, {
      total: 30,
      parallel: 2,
      random: rng(3),
      onSubmitted: async () => {},
      requestMs: 50,
    });
    expect(submitted).toHaveLength(30);
    expect(hung).toBeGreaterThan(30);
  });
});
