import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { BOX_ACTIONS, DESIRED_AFTER, SETTLED_STATUS } from "@doppio/contracts";
import Database from "better-sqlite3";
import pg from "pg";
import type { Cluster } from "./cluster.ts";
import type { EventWatcher, Submitted } from "./workload.ts";

export interface Check {
  name: string;
  ok: boolean;
  detail: string;
}

const IN_FLIGHT = ["pending", "delivered", "running"];

/** The statuses a box may settle in for a desired state: stopped is reached by a stop or a hibernate. */
function settlesIn(desired: string): string[] {
  return BOX_ACTIONS.filter((a) => DESIRED_AFTER[a] === desired).map((a) => SETTLED_STATUS[a]);
}

/** What the database holds about jobs and boxes right now. */
async function readDb(url: string) {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const jobs = (
      await client.query<{
        id: string;
        status: string;
        action: string;
        error_code: string | null;
        error: string | null;
      }>("select id, status, action, error_code, error from agent_jobs")
    ).rows;
    const boxes = (
      await client.query<{
        slug: string;
        status: string;
        desired_state: string;
        deleted: boolean;
        server: string;
      }>(
        `select b.slug, b.status, b.desired_state, b.deleted_at is not null as deleted, s.name as server
           from boxes b join servers s on s.id = b.server_id`,
      )
    ).rows;
    const servers = (
      await client.query<{ name: string; unreachable: boolean }>(
        "select name, unreachable_since is not null as unreachable from servers",
      )
    ).rows;
    return { jobs, boxes, servers };
  } finally {
    await client.end();
  }
}

/** The checks a chaos run ends with, once everything is back and no job is in flight. */
export async function endChecks(
  cluster: Cluster,
  submitted: Submitted[],
  watcher: EventWatcher,
): Promise<Check[]> {
  const { jobs, boxes, servers } = await readDb(cluster.databaseUrl);
  const checks: Check[] = [];
  const check = (name: string, problems: string[], okDetail: string) =>
    checks.push({
      name,
      ok: problems.length === 0,
      detail: problems.length ? problems.slice(0, 10).join("; ") : okDetail,
    });

  const byId = new Map(jobs.map((j) => [j.id, j]));
  check(
    "every accepted job is in the database",
    submitted.filter((s) => !byId.has(s.jobId)).map((s) => `${s.action} ${s.slug} (${s.jobId}) missing`),
    `${submitted.length} accepted, ${jobs.length} in the database`,
  );
  check(
    "every job finished (none pending, delivered or running)",
    jobs.filter((j) => IN_FLIGHT.includes(j.status)).map((j) => `${j.action} ${j.id} still ${j.status}`),
    `${jobs.length} finished`,
  );
  check(
    "no job failed",
    jobs.filter((j) => j.status === "failed").map((j) => `${j.action} ${j.id}: ${j.error_code} ${j.error}`),
    `${jobs.filter((j) => j.status === "succeeded").length} succeeded`,
  );
  check(
    "every host is back (heartbeating)",
    servers.filter((s) => s.unreachable).map((s) => `${s.name} unreachable`),
    `${servers.length} hosts`,
  );

  const hostState = new Map(
    cluster.hosts.map((h) => {
      const state = existsSync(h.stateFile)
        ? (JSON.parse(readFileSync(h.stateFile, "utf8")) as { vms: Record<string, { state: string }> })
        : { vms: {} };
      const db = new Database(path.join(h.dataDir, "agent.sqlite"), { readonly: true });
      const ips = (db.prepare("select slug from ip_allocations").all() as Array<{ slug: string }>).map(
        (r) => r.slug,
      );
      db.close();
      return [h.name, { vms: state.vms, ips }];
    }),
  );
  const observedProblems: string[] = [];
  const leakProblems: string[] = [];
  for (const box of boxes) {
    const host = hostState.get(box.server);
    const vm = host?.vms[box.slug];
    if (box.deleted) {
      if (vm) leakProblems.push(`${box.slug} deleted but its VM is ${vm.state} on ${box.server}`);
      continue;
    }
    if (!settlesIn(box.desired_state).includes(box.status)) {
      observedProblems.push(`${box.slug} is ${box.status}, should be ${box.desired_state}`);
    }
    const seen = vm?.state ?? "gone";
    if ((box.desired_state === "running") !== (seen === "running")) {
      observedProblems.push(`${box.slug} should be ${box.desired_state}, its VM on ${box.server} is ${seen}`);
    }
    if ((box.status === "hibernated") !== (seen === "hibernated")) {
      observedProblems.push(`${box.slug} is ${box.status}, its VM on ${box.server} is ${seen}`);
    }
  }
  const live = new Set(boxes.filter((b) => !b.deleted).map((b) => `${b.server}/${b.slug}`));
  for (const [name, host] of hostState) {
    for (const slug of Object.keys(host.vms)) {
      if (!live.has(`${name}/${slug}`)) leakProblems.push(`VM ${slug} on ${name} belongs to no live box`);
    }
    for (const slug of host.ips) {
      if (!live.has(`${name}/${slug}`)) leakProblems.push(`IP of ${slug} on ${name} belongs to no live box`);
    }
  }
  const liveCount = boxes.filter((b) => !b.deleted).length;
  check("observed == desired for every box", observedProblems, `${liveCount} live boxes match`);
  check("no leaked VM or IP allocation on any host", leakProblems, `${cluster.hosts.length} hosts clean`);

  const sseProblems: string[] = [];
  for (const box of boxes) {
    const final = box.deleted ? "deleted" : box.status;
    const seen = watcher.status.get(box.slug);
    if (seen !== final) sseProblems.push(`${box.slug}: stream last said ${seen}, final ${final}`);
  }
  check(
    "the event stream saw every box's final state",
    sseProblems,
    `${boxes.length} boxes, ${watcher.reconnects} stream reconnects`,
  );
  return checks;
}
