import { performance } from "node:perf_hooks";
import { BOX_SIZES, type Box } from "@doppio/contracts";
import { ApiError, DoppioClient, waitForBox } from "@doppio/sdk";
import { percentile } from "../../apps/agent/bench/qemu-bench.ts";
import { openAsOwner, viaEdge } from "./edge.ts";
import type { Host } from "./host.ts";

/**
 * The scale test: N boxes created at once on one server through the control plane's public
 * API, checked from outside (unique IPs, site and code answer through the host's edge), their
 * VMMs' memory read on the host, stopped, started and deleted, and then the host searched for
 * anything of theirs that is left. Each check is one line of the checklist.
 */
export interface ScaleOptions {
  apiUrl: string;
  server: string;
  boxes: number;
  template: string;
  admin: { email: string; password: string };
  host: Host;
  /** `host:port` to send box URLs' requests to (with their Host header); none: DNS. */
  edge?: string;
  log?: (line: string) => void;
}

interface Check {
  name: string;
  ok: boolean;
  detail: string;
}

export interface ScaleResult {
  checks: Check[];
  ok: boolean;
  createMs: number[];
  memory: { pid: number; rssKb: number; pssKb: number }[];
  phasesMs: Record<string, number>;
}

const PASSWORD = "scale test: correct horse battery staple";
const WAIT_MS = 20 * 60_000;

async function signIn(apiUrl: string, path: string, body: unknown): Promise<Record<string, string>> {
  const res = await fetch(new URL(path, apiUrl), {
    method: "POST",
    headers: { "content-type": "application/json", "sec-fetch-site": "same-origin" },
    body: JSON.stringify(body),
  });
  const cookie = res.headers
    .getSetCookie()
    .map((c) => c.split(";")[0]!)
    .find((c) => c.startsWith("doppio_session="));
  if (!res.ok || !cookie) throw new Error(`${path} answered ${res.status}: ${await res.text()}`);
  // Not a browser: it says where it stands the way browsers do, as the CLI does (apps/cli/src/api.ts).
  return { cookie, "sec-fetch-site": "same-origin" };
}

export async function runScaleTest(o: ScaleOptions): Promise<ScaleResult> {
  const log = o.log ?? ((l: string) => console.log(l));
  const checks: Check[] = [];
  const check = (name: string, ok: boolean, detail = "") => {
    checks.push({ name, ok, detail });
    log(`  ${ok ? "PASS" : "FAIL"}  ${name}${detail ? ` — ${detail}` : ""}`);
    return ok;
  };
  const phasesMs: Record<string, number> = {};
  const timed = async <T>(phase: string, fn: () => Promise<T>): Promise<T> => {
    const t = performance.now();
    try {
      return await fn();
    } finally {
      phasesMs[phase] = Math.round(performance.now() - t);
    }
  };

  const adminSession = await signIn(o.apiUrl, "/api/v1/auth/login", o.admin);
  const admin = new DoppioClient({ baseUrl: o.apiUrl, headers: adminSession });
  const server = await admin.request("getServer", { params: { name: o.server } });
  const others = (await admin.request("listServers", {})).servers.filter(
    (s) => s.name !== o.server && s.status === "active",
  );
  check(`server ${o.server} is active`, server.status === "active", server.status);
  // Placement reserves each box's size: say so up front when the server cannot hold N.
  const size = (await admin.request("listTemplates", {})).templates.find(
    (t) => t.name === o.template,
  )?.defaultSize;
  if (size) {
    const each = BOX_SIZES[size];
    const room = Math.min(
      ...(["vcpu", "memoryMb", "diskGb"] as const).map((k) =>
        Math.floor((server.capacity[k] - server.used[k]) / each[k]),
      ),
    );
    check(
      `${o.server} has room for ${o.boxes} ${size} boxes`,
      room >= o.boxes,
      `room for ${room}: capacity ${JSON.stringify(server.capacity)}, used ${JSON.stringify(server.used)}`,
    );
  }
  if (others.length)
    log(`  note: other active servers (${others.map((s) => s.name).join(", ")}) may take some of the boxes`);

  // A user of its own, as a customer: signed up through the public API.
  const run = Date.now().toString(36).slice(-6);
  const session = await signIn(o.apiUrl, "/api/v1/auth/signup", {
    email: `scale-${run}@example.com`,
    password: PASSWORD,
  });
  const user = new DoppioClient({ baseUrl: o.apiUrl, headers: session });
  const names = Array.from({ length: o.boxes }, (_, i) => `scale-${run}-${i + 1}`);

  // N creates at once; each one's time is from its request to its box running.
  const createMs: number[] = [];
  const created = await timed("create", () =>
    Promise.allSettled(
      names.map(async (name) => {
        const t = performance.now();
        const { box } = await user.request("createBox", { body: { name, template: o.template } });
        const running = await waitForBox(user, box.slug, {
          pollMs: 1000,
          signal: AbortSignal.timeout(WAIT_MS),
        });
        createMs.push(performance.now() - t);
        return running;
      }),
    ),
  );
  const boxes = created.flatMap((r) => (r.status === "fulfilled" ? [r.value] : []));
  const failures = created.flatMap((r) =>
    r.status === "rejected" ? [String(r.reason?.message ?? r.reason)] : [],
  );
  check(`${o.boxes} concurrent creates reach running`, boxes.length === o.boxes, failures.join("; "));
  const slugs = boxes.map((b) => b.slug);
  const ips = boxes.map((b) => b.ip).filter((ip): ip is string => !!ip);
  check(
    `every box is on ${o.server}`,
    boxes.every((b) => b.server === o.server),
    boxes
      .filter((b) => b.server !== o.server)
      .map((b) => `${b.slug} on ${b.server}`)
      .join(", "),
  );
  check("unique IPs", ips.length === boxes.length && new Set(ips).size === ips.length, ips.join(" "));

  await answers(boxes, "site");
  await answers(boxes, "code");

  const memory = [...(await o.host.vmms(slugs)).values()].flat();
  check(
    "one VMM per box on the host",
    memory.length === boxes.length,
    `${memory.length} VMM(s) for ${boxes.length} boxes`,
  );

  await timed("stop", () => transition(boxes, "stopBox", "stopped"));
  check("stopped boxes have no VMM", (await o.host.vmms(slugs)).size === 0);
  await timed("start", () => transition(boxes, "startBox", "running"));
  await answers(boxes, "site", " after start");
  await timed("delete", () => deleteAll(boxes));

  const left = await o.host.leftovers(slugs, ips);
  for (const [what, items] of Object.entries(left))
    check(`no ${what} left`, items.length === 0, items.slice(0, 5).join("; "));
  const cpLeft = await Promise.all(
    slugs.map((slug) =>
      user.request("getBox", { params: { slug } }).then(
        (b) => (b.status === "deleted" ? null : `${slug} ${b.status}`),
        (err) => (err instanceof ApiError && err.status === 404 ? null : `${slug}: ${err}`),
      ),
    ),
  );
  check(
    "the control plane lists none of them",
    cpLeft.every((x) => x === null),
    cpLeft.filter(Boolean).join(", "),
  );

  return { checks, ok: checks.every((c) => c.ok), createMs, memory, phasesMs };

  async function answers(list: Box[], which: "site" | "code", suffix = "") {
    const results = await Promise.all(
      list.map(async (b) => {
        const url = b.urls?.[which];
        if (!url) return `${b.slug}: no ${which} URL`;
        try {
          const res =
            which === "site"
              ? await viaEdge(url, { connect: o.edge })
              : await openAsOwner(o.apiUrl, session, url, o.edge);
          if (res.status !== 200) return `${b.slug}: ${res.status}`;
          // The minimal image's site and code server answer with the box's own name.
          if (o.template === "minimal" && res.body.trim() !== b.slug) return `${b.slug}: not its own page`;
          return null;
        } catch (err) {
          return `${b.slug}: ${err instanceof Error ? err.message : String(err)}`;
        }
      }),
    );
    check(
      `${which} URLs answer through the edge${suffix}`,
      results.every((r) => r === null),
      results.filter(Boolean).join("; "),
    );
  }

  async function transition(list: Box[], action: "stopBox" | "startBox", status: "stopped" | "running") {
    const results = await Promise.allSettled(
      list.map(async (b) => {
        await user.request(action, { params: { slug: b.slug } });
        await waitForBox(user, b.slug, { status, pollMs: 1000, signal: AbortSignal.timeout(WAIT_MS) });
      }),
    );
    const failed = results.flatMap((r, i) =>
      r.status === "rejected" ? [`${list[i]!.slug}: ${r.reason}`] : [],
    );
    check(`all ${list.length} reach ${status}`, failed.length === 0, failed.join("; "));
  }

  async function deleteAll(list: Box[]) {
    const results = await Promise.allSettled(
      list.map(async (b) => {
        await user.request("deleteBox", { params: { slug: b.slug } });
        const deadline = Date.now() + WAIT_MS;
        for (;;) {
          const gone = await user.request("getBox", { params: { slug: b.slug } }).then(
            (x) => x.status === "deleted",
            (err) => {
              if (err instanceof ApiError && err.status === 404) return true;
              throw err;
            },
          );
          if (gone) return;
          if (Date.now() > deadline) throw new Error("not deleted in time");
          await new Promise((r) => setTimeout(r, 1000));
        }
      }),
    );
    const failed = results.flatMap((r, i) =>
      r.status === "rejected" ? [`${list[i]!.slug}: ${r.reason}`] : [],
    );
    check(`all ${list.length} deleted`, failed.length === 0, failed.join("; "));
  }
}

/** The figures the scale test measured, as lines to print. */
export function summary(r: ScaleResult): string[] {
  const mib = (kb: number) => (kb / 1024).toFixed(1);
  const avg = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);
  const lines = [
    `create (request → running), ${r.createMs.length} boxes: p50 ${(percentile(r.createMs, 50) / 1000).toFixed(1)} s, p95 ${(percentile(r.createMs, 95) / 1000).toFixed(1)} s`,
    `VMM memory per box: RSS ${mib(avg(r.memory.map((m) => m.rssKb)))} MiB, PSS ${mib(avg(r.memory.map((m) => m.pssKb)))} MiB (mean of ${r.memory.length}; PSS shares the golden's mapped pages)`,
    `phases (ms): ${JSON.stringify(r.phasesMs)}`,
  ];
  if (r.createMs.length === 0) lines.shift();
  return lines;
}
