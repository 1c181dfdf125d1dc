import { IN_FLIGHT_STATUS } from "@doppio/contracts";
import type { TestClient } from "../../../../api/test/support/client.ts";

/** A small seeded PRNG (mulberry32): the same seed gives the same sequence. */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** By default, a request without an answer for this long is given up and sent again. */
const REQUEST_MS = 30_000;

/** `call()`, or a rejection once it has taken `ms`. */
async function answered<T>(call: () => Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer in ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([call(), late]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * A request through the balancer, retried while the control plane is (partly) down:
 * network errors, 502/503 and 5xx, and requests left unanswered (a replica whose database
 * connections hang); each such request counts toward the stall guard. Anything else is an
 * answer.
 */
async function retrying<T>(
  what: string,
  call: () => Promise<{ status: number; body: T }>,
  requestMs = REQUEST_MS,
) {
  let last = "";
  const giveUp = Date.now() + 3 * 60_000;
  for (let i = 1; ; i++) {
    try {
      const res = await answered(call, requestMs);
      if (res.status < 500) return res;
      last = `${res.status} ${JSON.stringify(res.body).slice(0, 300)}`;
    } catch (err) {
      // the replica behind the connection died; try again
      last = (err as Error).message;
    }
    if (Date.now() > giveUp) throw new Error(`${what}: no answer after ${i} tries in 3 min (last: ${last})`);
    await sleep(500);
  }
}

export interface Submitted {
  jobId: string;
  slug: string;
  action: string;
}

/** What the workload needs of a user's API client (TestClient; a stand-in in workload.test.ts). */
export interface WorkloadClient {
  get(path: string): Promise<{ status: number; body: unknown }>;
  post(path: string, body?: unknown): Promise<{ status: number; body: unknown }>;
  del(path: string): Promise<{ status: number; body: unknown }>;
}

/** Statuses with a job in flight: the box takes no other action until it settles. */
const IN_FLIGHT = new Set<string>(Object.values(IN_FLIGHT_STATUS));
/** A box is settled when no job is in flight and its host is known. */
const settled = (status: string) => !IN_FLIGHT.has(status) && status !== "unknown";

/** With nothing accepted for this long the workload gives up and says what it waited for. */
const STALL_MS = 10 * 60_000;

/**
 * The user's stream of box actions until the API has accepted `total` jobs: creates, stops,
 * starts, hibernates, resets and deletes on its boxes, `parallel` at a time, each only on a
 * settled box (no job in flight) whose status allows it, and waits for that job to settle.
 * A request the API refuses does not count, so the run submits `total` jobs whatever the
 * faults do to the answers. Returns every job the API accepted.
 */
export async function runWorkload(
  user: WorkloadClient,
  opts: {
    total: number;
    parallel: number;
    random: () => number;
    onSubmitted: (n: number) => Promise<void>;
    log?: (line: string) => void;
    /** How long a request may go unanswered before it is sent again (REQUEST_MS). */
    requestMs?: number;
    /** Boxes the fault injector holds for now (a guest it paused): no action is sent to them. */
    held?: ReadonlySet<string>;
    /** Boxes a worker has an action in flight for (filled here; shared so the injector holds a settled one). */
    busy?: Set<string>;
  },
): Promise<Submitted[]> {
  const ms = opts.requestMs ?? REQUEST_MS;
  const submitted: Submitted[] = [];
  const ids = new Set<string>();
  const busy = opts.busy ?? new Set<string>();
  let created = 0;
  // Jobs accepted plus requests on their way: never more than `total` are out at once.
  let reserved = 0;
  let refused = 0;
  // What each worker is doing, for the stall report below.
  const doing: string[] = Array.from({ length: opts.parallel }, () => "starting");
  let lastSubmit = Date.now();
  const stalled = () =>
    `nothing accepted for ${Math.round((Date.now() - lastSubmit) / 1000)} s ` +
    `(${submitted.length} accepted, ${refused} refused); workers: ${doing.join(" | ")}`;
  const stallTimer = setInterval(() => {
    if (Date.now() - lastSubmit >= 60_000) opts.log?.(`  workload: ${stalled()}`);
  }, 30_000);
  const worker = async (w: number) => {
    while (reserved < opts.total) {
      if (Date.now() - lastSubmit > STALL_MS) throw new Error(`workload stalled: ${stalled()}`);
      doing[w] = "listing boxes";
      const list = await retrying("list", () => user.get("/api/v1/boxes"), ms);
      const boxes = (
        list.body as { boxes: Array<{ slug: string; status: string; allowedActions: string[] }> }
      ).boxes;
      const ready = boxes.filter(
        (b) =>
          !busy.has(b.slug) && !opts.held?.has(b.slug) && settled(b.status) && b.allowedActions.length > 0,
      );
      const r = opts.random();
      let slug: string;
      let action: string;
      if (boxes.length < 4 || ready.length === 0 || r < 0.15) {
        slug = `chaos-box-${created++}`;
        action = "create";
      } else {
        const box = ready[Math.floor(opts.random() * ready.length)]!;
        // A box broken by a failed create (full disk) has nothing to start or reset from: delete it.
        const choices =
          box.status === "error"
            ? box.allowedActions.filter((a) => a === "delete")
            : box.allowedActions.filter((a) => a !== "delete" || boxes.length > 3);
        if (choices.length === 0) {
          await sleep(100);
          continue;
        }
        slug = box.slug;
        action = choices[Math.floor(opts.random() * choices.length)]!;
      }
      // Checked again here: the other workers may have taken the last slots while this one listed.
      if (reserved >= opts.total) break;
      reserved++;
      busy.add(slug);
      doing[w] = `${action} ${slug}: request`;
      const res =
        action === "create"
          ? await retrying(
              "create",
              () => user.post("/api/v1/boxes", { template: "minimal", name: slug }),
              ms,
            )
          : action === "delete"
            ? await retrying("delete", () => user.del(`/api/v1/boxes/${slug}`), ms)
            : await retrying(action, () => user.post(`/api/v1/boxes/${slug}/${action}`), ms);
      const job = (res.body as { job?: { id: string } } | null)?.job;
      // 200: the same action was already in flight (a resent request whose first answer was lost).
      if ((res.status === 202 || res.status === 200) && job && !ids.has(job.id)) {
        ids.add(job.id);
        submitted.push({ jobId: job.id, slug, action });
        lastSubmit = Date.now();
        await opts.onSubmitted(submitted.length);
      } else {
        reserved--;
        refused++;
        // 409 on a create: its first answer was lost when its replica died; the box and its
        // job exist (the end checks count jobs in the database, not only accepted ones).
        if (!(res.status === 409 && action === "create")) {
          opts.log?.(
            `  workload: ${action} ${slug} answered ${res.status} ${JSON.stringify(res.body).slice(0, 200)}`,
          );
        }
      }
      await waitSettled(user, slug, ms, (seen) => {
        doing[w] = `${action} ${slug}: waiting (${seen})`;
      });
      busy.delete(slug);
    }
    doing[w] = "done";
  };
  try {
    await Promise.all(Array.from({ length: opts.parallel }, (_, w) => worker(w)));
  } finally {
    clearInterval(stallTimer);
  }
  return submitted;
}

/** Until the box has no job in flight and a known host (or is gone). */
async function waitSettled(
  user: WorkloadClient,
  slug: string,
  requestMs: number,
  seen: (status: string) => void,
): Promise<void> {
  const deadline = Date.now() + 5 * 60_000;
  for (let i = 0; Date.now() < deadline; i++) {
    const res = await retrying("box", () => user.get(`/api/v1/boxes/${slug}`), requestMs);
    if (res.status === 404) return;
    const box = res.body as { status: string };
    seen(`${box.status}, try ${i}`);
    if (settled(box.status)) return;
    await sleep(200);
  }
}

/**
 * What a dashboard does: follow the team's events through the balancer, and on every
 * (re)connect reread the box list, since events sent while it was away are gone.
 */
export class EventWatcher {
  readonly status = new Map<string, string>();
  reconnects = 0;
  private stopped = false;
  private abort = new AbortController();
  private readonly done: Promise<void>;

  constructor(private readonly user: TestClient) {
    this.done = this.loop();
  }

  private async loop(): Promise<void> {
    while (!this.stopped) {
      try {
        this.abort = new AbortController();
        const res = await this.user.open("/api/v1/events", {}, this.abort.signal);
        if (res.status !== 200 || !res.body) throw new Error(`events: ${res.status}`);
        const list = await this.user.get("/api/v1/boxes");
        if (list.status === 200) {
          const live = new Set<string>();
          for (const b of list.body.boxes as Array<{ slug: string; status: string }>) {
            live.add(b.slug);
            this.status.set(b.slug, b.status);
          }
          for (const slug of this.status.keys()) if (!live.has(slug)) this.status.set(slug, "deleted");
        }
        const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += value;
          for (let end = buf.indexOf("\n\n"); end >= 0; end = buf.indexOf("\n\n")) {
            const frame = buf.slice(0, end);
            buf = buf.slice(end + 2);
            const data = /^data: (.*)$/m.exec(frame)?.[1];
            if (/^event: box$/m.test(frame) && data) {
              const box = JSON.parse(data) as { slug: string; status: string };
              this.status.set(box.slug, box.status);
            }
          }
        }
      } catch {
        // the replica went away; reconnect
      }
      if (!this.stopped) {
        this.reconnects++;
        await sleep(300);
      }
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.abort.abort();
    await this.done;
  }
}
