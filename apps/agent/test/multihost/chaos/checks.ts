import path from "node:path";
import { BOX_ACTIONS, DESIRED_AFTER, SETTLED_STATUS } from "@doppio/contracts";
import Database from "better-sqlite3";
import pg from "pg";
import { canonicalJson } from "../../../src/edge/caddy-config.ts";
import type { Cluster } from "./cluster.ts";
import { fakeFacts } from "./fake-facts.ts";
import { edgeStatus, expectedEdgeConfig } from "./host-caddy.ts";
import type { VmFacts } from "./host-facts.ts";
import { qemuFacts } from "./qemu-facts.ts";
import type { EventWatcher, Submitted } from "./workload.ts";

/**
 * What the run did that the checks must know: hosts whose disk was filled at some point,
 * the boxes (`host/slug`) whose VMM process was killed, and guests paused on a full disk
 * that did not run again once it was freed (QEMU mode).
 */
export interface RunFacts {
  diskFullHosts: Set<string>;
  killedVmms: Set<string>;
  stuckGuests: string[];
}

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
        server: string;
        last_seq: number;
        attempts: number;
        slug: string | null;
      }>(
        `select j.id, j.status, j.action, j.error_code, j.error, s.name as server, j.last_seq, j.attempts,
                b.slug
           from agent_jobs j join servers s on s.id = j.server_id left join boxes b on b.id = j.box_id`,
      )
    ).rows;
    const boxes = (
      await client.query<{
        slug: string;
        status: string;
        desired_state: string;
        deleted: boolean;
        server: string;
        error_code: string | null;
      }>(
        `select b.slug, b.status, b.desired_state, b.deleted_at is not null as deleted, s.name as server,
                b.error_code
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

interface AgentJobRecord {
  id: string;
  status: string;
  ok: number | null;
  attempt: number;
  lastSeq: number;
  local: number;
  results: number;
  undelivered: number;
}

/** The checks a chaos run ends with, once everything is back and no job is in flight. */
export async function endChecks(
  cluster: Cluster,
  submitted: Submitted[],
  watcher: EventWatcher,
  facts: RunFacts,
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
  // A full disk must fail what writes to it, with its code; nothing else may fail. A VMM
  // killed while its guest booted is launched again by that launch (vmm/relaunch.ts),
  // and a running box's dead VMM is restarted by reconcile: neither fails a job.
  const diskFull = (j: { error_code: string | null; server: string }) =>
    j.error_code === "disk_full" && facts.diskFullHosts.has(j.server);
  const failed = jobs.filter((j) => j.status === "failed");
  check(
    "no job failed, except with disk_full on a host whose disk was filled",
    failed
      .filter((j) => !diskFull(j))
      .map((j) => `${j.action} ${j.slug} ${j.id} on ${j.server}: ${j.error_code} ${j.error}`),
    `${jobs.filter((j) => j.status === "succeeded").length} succeeded, ${failed.filter(diskFull).length} failed with disk_full; ${facts.killedVmms.size} VMMs killed`,
  );
  if (facts.diskFullHosts.size > 0)
    check(
      "every guest paused on a full disk runs again once it is freed",
      facts.stuckGuests,
      `${facts.diskFullHosts.size} disks filled`,
    );
  check(
    "every host is back (heartbeating)",
    servers.filter((s) => s.unreachable).map((s) => `${s.name} unreachable`),
    `${servers.length} hosts`,
  );

  const hostState = new Map<
    string,
    VmFacts & { ips: string[]; records: AgentJobRecord[]; integrity: string }
  >();
  for (const h of cluster.hosts) {
    const live = new Set(boxes.filter((b) => !b.deleted && b.server === h.name).map((b) => b.slug));
    const vmFacts = h.backend === "qemu" ? await qemuFacts(h, live) : fakeFacts(h);
    const db = new Database(path.join(h.dataDir, "agent.sqlite"), { readonly: true });
    const ips = (db.prepare("select slug from ip_allocations").all() as Array<{ slug: string }>).map(
      (r) => r.slug,
    );
    const records = db
      .prepare(
        `select id, status, ok, attempt, last_seq as lastSeq, local,
                (select count(*) from outbox o where o.job_id = jobs.id
                   and json_extract(o.event, '$.type') = 'result') as results,
                (select count(*) from outbox o where o.job_id = jobs.id and o.delivered = 0) as undelivered
           from jobs`,
      )
      .all() as AgentJobRecord[];
    const integrity = (db.pragma("integrity_check") as Array<{ integrity_check: string }>)
      .map((r) => r.integrity_check)
      .join(", ");
    db.close();
    hostState.set(h.name, { ...vmFacts, ips, records, integrity });
  }
  const observedProblems: string[] = [];
  const leakProblems: string[] = [];
  let brokenByDisk = 0;
  for (const box of boxes) {
    const host = hostState.get(box.server);
    const vm = host?.vms[box.slug];
    if (box.deleted) {
      if (vm) leakProblems.push(`${box.slug} deleted but its VM is ${vm.state} on ${box.server}`);
      continue;
    }
    if (box.status === "error" && diskFull(box)) {
      // Its create or reset failed for want of space: settled in error, nothing running.
      brokenByDisk++;
      if (vm?.state === "running") observedProblems.push(`${box.slug} is in error but its VM runs`);
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
    leakProblems.push(...host.leakProblems);
  }
  const liveCount = boxes.filter((b) => !b.deleted).length;
  check(
    "observed == desired for every box",
    observedProblems,
    `${liveCount} live boxes match (${brokenByDisk} in error: disk_full)`,
  );
  check(
    cluster.hosts.some((h) => h.backend === "qemu")
      ? "no leaked VM, IP allocation, TAP, firewall entry, route or box directory on any host"
      : "no leaked VM or IP allocation on any host",
    leakProblems,
    `${cluster.hosts.length} hosts clean`,
  );

  // Each job ran on one host, finished there once, and every event it wrote reached the control plane.
  const recordProblems: string[] = [];
  const seenOn = new Map<string, string[]>();
  let reRun = 0;
  for (const [name, host] of hostState) {
    for (const r of host.records) {
      if (r.local === 1) continue;
      seenOn.set(r.id, [...(seenOn.get(r.id) ?? []), name]);
      const cp = byId.get(r.id);
      if (!cp) {
        recordProblems.push(`${name} ran ${r.id}, which the control plane does not know`);
        continue;
      }
      if (r.attempt > 1) reRun++;
      if (r.status !== "done") recordProblems.push(`${cp.action} ${r.id} is ${r.status} on ${name}`);
      if (r.results !== 1) recordProblems.push(`${cp.action} ${r.id} has ${r.results} results on ${name}`);
      if ((r.ok === 1) !== (cp.status === "succeeded")) {
        recordProblems.push(`${cp.action} ${r.id}: ${name} says ok=${r.ok}, the control plane ${cp.status}`);
      }
      if (r.undelivered > 0 || r.lastSeq !== cp.last_seq) {
        recordProblems.push(
          `${cp.action} ${r.id}: ${name} wrote events up to ${r.lastSeq} (${r.undelivered} undelivered), the control plane applied up to ${cp.last_seq}`,
        );
      }
    }
  }
  for (const j of jobs) {
    const on = seenOn.get(j.id) ?? [];
    if (on.length !== 1) recordProblems.push(`${j.action} ${j.id} recorded on [${on.join(", ")}]`);
    else if (on[0] !== j.server)
      recordProblems.push(`${j.action} ${j.id} ran on ${on[0]}, placed on ${j.server}`);
  }
  check(
    "every job applied once: one record on its own host, one result, every event delivered",
    recordProblems,
    `${seenOn.size} agent job records; ${reRun} resumed after an agent crash; ${jobs.filter((j) => j.attempts > 1).length} handed out more than once`,
  );

  // The VMM processes: each running VM has one, nothing else runs on a host.
  const vmmProblems = [...hostState.values()].flatMap((h) => h.vmmProblems);
  const vmms = [...hostState.values()].reduce((n, h) => n + h.vmms, 0);
  if (cluster.hosts.some((h) => h.netns)) {
    check("every running VM has its VMM process, and no other runs", vmmProblems, `${vmms} VMM processes`);
  }

  // Nothing corrupted: the agents' databases and the boxes' disks.
  const dataProblems: string[] = [];
  for (const h of cluster.hosts) {
    const host = hostState.get(h.name)!;
    if (host.integrity !== "ok") dataProblems.push(`${h.name} agent.sqlite: ${host.integrity}`);
    dataProblems.push(...host.dataProblems);
  }
  check(
    "no data corrupted (agent databases, box disks)",
    dataProblems,
    `${cluster.hosts.length} hosts intact`,
  );

  // Each host's Caddy carries the agent's config and routes: live boxes known, deleted ones gone.
  const edgeProblems: string[] = [];
  let probes = 0;
  for (const h of cluster.hosts) {
    if (!h.caddy || !h.edgeListen) continue;
    const want = expectedEdgeConfig({
      domain: h.domain,
      caddyAdmin: h.caddy.adminAddress,
      agentListen: h.agentListen,
      edgeListen: h.edgeListen,
      dataDir: h.dataDir,
    });
    const have = canonicalJson(await h.caddy.admin.getConfig().catch(() => null));
    if (have !== want) edgeProblems.push(`${h.name}: Caddy's config is not the agent's`);
    for (const box of boxes.filter((b) => b.server === h.name && b.status !== "error")) {
      const status = await edgeStatus(h.edgeListen, `${box.slug}.code.${h.domain}`).catch(() => 0);
      probes++;
      // The code address is private: the agent answers "sign in" (401) for a box it routes,
      // whatever its state, and "no such box" (404) once it is gone. Caddy alone gives neither.
      const want = box.deleted ? 404 : 401;
      if (status !== want)
        edgeProblems.push(`${box.slug} via ${h.name}'s Caddy: ${status}, expected ${want}`);
    }
  }
  if (cluster.hosts.some((h) => h.caddy)) {
    check(
      "every host's Caddy carries the agent's config and routes",
      edgeProblems,
      `${probes} requests through Caddy`,
    );
  }

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
