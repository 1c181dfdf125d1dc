import { spawnSync } from "node:child_process";
import path from "node:path";
import { expect, test } from "vitest";
import { buildBundle } from "../../../../provision/bundle/build-bundle.ts";
import type { TestClient } from "../../../api/test/support/client.ts";
import type { TestControlPlane } from "../../../api/test/support/control-plane.ts";
import { waitForPlay } from "../../../api/test/support/plays.ts";
import { tapNameForIp } from "../../src/net/naming.ts";
import { REPO, type TestHost } from "./support/test-host.ts";

/**
 * Replacing the agent on a live host loses nothing: a running box keeps its VMM (same PID)
 * and keeps answering through the host's Caddy, a job queued for the host while the agent is
 * replaced runs exactly once on the new agent, and heartbeats resume. Runs on the shared
 * booted host of playbook.test.ts once it is a provisioned, active server.
 */
export function deployKeepsWork(
  env: () => { cp: TestControlPlane; host: TestHost; server: string; domain: string },
  timings: Record<string, number>,
): void {
  const MIN = 60_000;
  const admin = () => env().cp.admin();
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  async function waitBox(client: TestClient, slug: string, status: string, timeoutMs: number) {
    const deadline = Date.now() + timeoutMs;
    let box = (await client.get(`/api/v1/boxes/${slug}`)).body;
    while (box.status !== status && Date.now() < deadline) {
      if (box.status === "error") break;
      await sleep(1000);
      box = (await client.get(`/api/v1/boxes/${slug}`)).body;
    }
    expect(box.status, JSON.stringify(box)).toBe(status);
    return box;
  }

  async function jobOf(client: TestClient, slug: string, id: string) {
    const { jobs } = (await client.get(`/api/v1/boxes/${slug}/jobs`)).body;
    return jobs.find((j: { id: string }) => j.id === id);
  }

  async function waitJob(client: TestClient, slug: string, id: string, timeoutMs: number) {
    const deadline = Date.now() + timeoutMs;
    let job = await jobOf(client, slug, id);
    while (!["succeeded", "failed"].includes(job.status) && Date.now() < deadline) {
      await sleep(1000);
      job = await jobOf(client, slug, id);
    }
    return job;
  }

  /** PIDs of the QEMU processes running this box on the host. */
  const vmmPids = (slug: string): number[] =>
    env()
      .host.ssh("ps -eo pid=,args=")
      .split("\n")
      .filter((l) => /qemu-system/.test(l) && l.includes(`/${slug}/`))
      .map((l) => Number.parseInt(l.trim(), 10));

  /** The box's site, through the host's own Caddy (the edge), as a browser would ask. */
  const site = (slug: string): string =>
    env().host.ssh(`curl -s -m 20 -H 'Host: ${slug}.site.${env().domain}' http://127.0.0.1/ || true`).trim();

  const agentPid = () => env().host.ssh("systemctl show -p MainPID --value doppio-agent").trim();

  async function heartbeatAfter(client: TestClient, since: number) {
    const deadline = Date.now() + 2 * MIN;
    let srv = (await client.get(`/api/v1/servers/${env().server}`)).body;
    while (!(srv.lastHeartbeatAt && Date.parse(srv.lastHeartbeatAt) > since) && Date.now() < deadline) {
      await sleep(1000);
      srv = (await client.get(`/api/v1/servers/${env().server}`)).body;
    }
    expect(Date.parse(srv.lastHeartbeatAt ?? "0"), JSON.stringify(srv)).toBeGreaterThan(since);
    return srv;
  }

  /** What the host's agent knows of a job, and its recent log: the message of a failed check. */
  function agentSide(jobId: string): string {
    const script = `const D=require("better-sqlite3");const db=new D("/var/lib/doppio-agent/agent.sqlite",{readonly:true});
      console.log(JSON.stringify({job:db.prepare("SELECT id,action,box,status,attempt,cp_attempt,last_seq FROM jobs WHERE id=?").get(process.argv[1]),
      outbox:db.prepare("SELECT seq,delivered,substr(event,1,120) AS event FROM outbox WHERE job_id=?").all(process.argv[1])}))`;
    const { host } = env();
    return [
      host.ssh(
        `cd /opt/doppio/apps/agent && /opt/doppio/runtime/bin/node -e '${script.replaceAll("'", "'\\''")}' ${jobId} 2>&1 || true`,
      ),
      host.ssh("journalctl -u doppio-agent --no-pager -n 60 -o cat 2>&1 | cut -c1-400 || true"),
    ].join("\n");
  }

  /**
   * What the host's agent holds for a job and its box: its local status and attempts, how
   * many result events its outbox ever had for it (one: a result is written once) and how
   * many are not yet delivered, and the box's IP allocations.
   */
  function agentRecord(jobId: string, slug: string) {
    const script = `const D=require("better-sqlite3");const db=new D("/var/lib/doppio-agent/agent.sqlite",{readonly:true});
      const [id,slug]=process.argv.slice(1);
      console.log(JSON.stringify({...db.prepare("SELECT status,attempt FROM jobs WHERE id=?").get(id),
      results:db.prepare("SELECT count(*) AS n FROM outbox WHERE job_id=? AND json_extract(event, '$.type')='result'").get(id).n,
      undelivered:db.prepare("SELECT count(*) AS n FROM outbox WHERE job_id=? AND delivered=0").get(id).n,
      ipAllocations:db.prepare("SELECT count(*) AS n FROM ip_allocations WHERE slug=?").get(slug).n,
      openJobs:db.prepare("SELECT count(*) AS n FROM jobs WHERE status!='done'").get().n}))`;
    const out = env().host.ssh(
      `cd /opt/doppio/apps/agent && /opt/doppio/runtime/bin/node -e '${script.replaceAll("'", "'\\''")}' ${jobId} ${slug}`,
    );
    return JSON.parse(out.trim().split("\n").at(-1)!) as {
      status: string;
      attempt: number;
      results: number;
      undelivered: number;
      ipAllocations: number;
      openJobs: number;
    };
  }

  /** The host's network links that are this box's TAP (named from its address). */
  const taps = (ip: string): string[] => {
    const tap = tapNameForIp(ip);
    return env()
      .host.ssh("ip -o link show")
      .split("\n")
      .filter((l) => l.includes(`: ${tap}:`) || l.includes(`: ${tap}@`));
  };

  /** Ran once: succeeded, no re-run after an agent restart, each step once. */
  function ranOnce(job: {
    id: string;
    status: string;
    log: string;
    steps: { name: string }[];
    error: string | null;
  }) {
    if (job.status !== "succeeded") expect.fail(`${JSON.stringify(job)}\n${agentSide(job.id)}`);
    expect(job.log).not.toMatch(/running again after an agent restart/);
    const names = job.steps.map((s) => s.name);
    expect(names.length).toBeGreaterThan(0);
    expect(names).toEqual([...new Set(names)]);
  }

  const boxes = { keeper: "", queued: "" };
  let keeperPid = 0;

  test(
    "two boxes created through the control plane run on the host and answer through its Caddy",
    async () => {
      const client = await admin();
      const started = Date.now();
      const made = await Promise.all(
        ["keeper", "queued"].map((name) => client.post("/api/v1/boxes", { template: "minimal", name })),
      );
      for (const res of made) expect(res.status, JSON.stringify(res.body)).toBe(202);
      boxes.keeper = made[0]!.body.box.slug;
      boxes.queued = made[1]!.body.box.slug;
      for (const slug of Object.values(boxes)) {
        const box = await waitBox(client, slug, "running", 15 * MIN);
        expect(box.server).toBe(env().server);
        expect(site(slug)).toBe(slug);
      }
      timings.twoBoxesRunning = Date.now() - started;
      const pids = vmmPids(boxes.keeper);
      expect(pids).toHaveLength(1);
      keeperPid = pids[0]!;
    },
    20 * MIN,
  );

  test(
    "deploy-agent.sh replaces the bundle: the running box keeps its VMM, a job queued meanwhile runs once on the new agent",
    async () => {
      const { host, server } = env();
      const client = await admin();
      // The job waits for the host: the server is disabled (its agent gets no jobs) for the
      // deploy, as an operator does for maintenance.
      expect((await client.post(`/api/v1/servers/${server}/actions`, { action: "disable" })).status).toBe(
        200,
      );
      const stop = await client.post(`/api/v1/boxes/${boxes.queued}/stop`);
      expect(stop.status, JSON.stringify(stop.body)).toBe(202);
      const jobId: string = stop.body.job.id;

      const bundle = buildBundle({
        out: path.join(REPO, ".data/provision/bundles"),
        label: "deploy keeps work",
      });
      const oldAgent = agentPid();
      const oldRelease = host.ssh("readlink /opt/doppio").trim();
      const args = ["--target", `root@${host.ip}`, "--identity", host.sshKey];
      const started = Date.now();
      const r = spawnSync(
        path.join(REPO, "scripts/deploy-agent.sh"),
        [...args, "--known-hosts", host.knownHosts, "--bundle", bundle.path],
        { encoding: "utf8" },
      );
      const deployed = Date.now();
      timings.deployAgentShWithBoxes = deployed - started;
      expect(r.status, r.stderr).toBe(0);
      expect(r.stdout.trim().split("\n").at(-1)).toBe("active");
      // The bundle and the agent process were replaced.
      expect(host.ssh("readlink /opt/doppio").trim()).toBe(`/opt/doppio-releases/${bundle.id}`);
      expect(host.ssh("readlink /opt/doppio").trim()).not.toBe(oldRelease);
      expect(agentPid()).not.toBe(oldAgent);

      // The running box: same VMM, still answering through the edge.
      expect(vmmPids(boxes.keeper)).toEqual([keeperPid]);
      expect(site(boxes.keeper)).toBe(boxes.keeper);
      // The queued job has not run: the server is still disabled.
      expect((await jobOf(client, boxes.queued, jobId)).status).toBe("pending");
      expect(vmmPids(boxes.queued)).toHaveLength(1);
      // The new agent heartbeats.
      await heartbeatAfter(client, deployed);

      expect((await client.post(`/api/v1/servers/${server}/actions`, { action: "activate" })).status).toBe(
        200,
      );
      const job = await waitJob(client, boxes.queued, jobId, 5 * MIN);
      ranOnce(job);
      expect(job.attempts).toBe(1);
      await waitBox(client, boxes.queued, "stopped", MIN);
      expect(vmmPids(boxes.queued)).toEqual([]);
      expect(vmmPids(boxes.keeper)).toEqual([keeperPid]);
    },
    15 * MIN,
  );

  test(
    "a box job running when Deploy agent (deploy-agent.yml) restarts the agent finishes once: one result, the box running, nothing leaked",
    async () => {
      const { server } = env();
      const client = await admin();
      expect((await client.get(`/api/v1/servers/${server}`)).body.status).toBe("active");
      // A stopped box: its start is a cold boot, long enough under TCG to span the restart.
      if ((await client.get(`/api/v1/boxes/${boxes.queued}`)).body.status !== "stopped")
        expect((await client.post(`/api/v1/boxes/${boxes.queued}/stop`)).status).toBe(202);
      await waitBox(client, boxes.queued, "stopped", 5 * MIN);
      const oldAgent = agentPid();
      const res = await client.post(`/api/v1/servers/${server}/plays`, {
        playbook: "deploy_agent",
        variables: {},
      });
      expect(res.status, JSON.stringify(res.body)).toBe(202);
      const playId: string = res.body.id;
      // The start goes out once the new release is in place, a few tasks before the restart:
      // a cold boot under TCG is still running when the agent is told to stop.
      const done = (t: { status: string }) => !["pending", "running"].includes(t.status);
      await waitForPlay(
        client,
        playId,
        (p) =>
          p.status !== "running" ||
          p.tasks.some((t: any) => t.name === "Make it the current release" && done(t)),
        10 * MIN,
      );
      const start = await client.post(`/api/v1/boxes/${boxes.queued}/start`);
      expect(start.status, JSON.stringify(start.body)).toBe(202);
      const jobId: string = start.body.job.id;
      // Once it waits for the guest, the guest is frozen (SIGSTOP of its QEMU, which the agent
      // still counts as running) until the play is over: the job is still waiting for READY
      // when the agent restarts, however long the play's last tasks take.
      const waiting = (j: { steps: Array<{ name: string; status: string }> }) =>
        j.steps.some((st) => st.name === "wait_ready" && st.status === "running");
      let job = await jobOf(client, boxes.queued, jobId);
      for (let i = 0; i < 600 && !waiting(job) && job.status !== "succeeded"; i++) {
        await sleep(50);
        job = await jobOf(client, boxes.queued, jobId);
      }
      expect(waiting(job), `never saw the start wait for its guest: ${JSON.stringify(job)}`).toBe(true);
      const frozen = vmmPids(boxes.queued);
      expect(frozen).toHaveLength(1);
      env().host.ssh(`kill -STOP ${frozen[0]}`);
      let play: any;
      try {
        play = await waitForPlay(client, playId, undefined, 10 * MIN);
      } finally {
        env().host.ssh(`kill -CONT ${frozen[0]}`);
      }
      expect(play.status, JSON.stringify(play.error)).toBe("success");
      expect(agentPid()).not.toBe(oldAgent);
      const restart = play.tasks.find((t: any) => t.handler && t.name === "Restart doppio-agent");
      expect(restart, JSON.stringify(play.tasks.map((t: any) => [t.name, t.status]))).toMatchObject({
        status: "changed",
      });

      job = await waitJob(client, boxes.queued, jobId, 10 * MIN);
      const agent = agentRecord(jobId, boxes.queued);
      const journal = env().host.ssh(
        "journalctl -u doppio-agent --no-pager -n 400 -o cat 2>&1 | grep -E 'stopping|resuming|job finished|running again' | cut -c1-300 || true",
      );
      const why = JSON.stringify({ job, agent, restart, journal });
      console.log(
        `[provision] a job running across the restart: agent attempts ${agent.attempt}; ${journal}`,
      );
      // It was running when the restart began (acknowledged before it, finished after it).
      expect(Date.parse(job.startedAt), why).toBeLessThan(Date.parse(restart.startedAt));
      expect(Date.parse(job.finishedAt), why).toBeGreaterThan(Date.parse(restart.startedAt));
      // Its result reached the control plane once: the agent wrote one result and delivered
      // everything, the control plane delivered the job once and it succeeded.
      expect(job.status, why).toBe("succeeded");
      expect(job.attempts, why).toBe(1);
      expect(agent, why).toMatchObject({ status: "done", results: 1, undelivered: 0, openJobs: 0 });
      const names = job.steps.map((s: { name: string }) => s.name);
      expect(names, why).toEqual([...new Set(names)]);
      // A succeeded job has no step left running (one cut short by the restart was run again).
      expect(
        job.steps.filter((s: { status: string }) => s.status !== "succeeded"),
        why,
      ).toEqual([]);

      // The box ends as asked, served by one VMM on one TAP and one address, through the edge.
      const box = await waitBox(client, boxes.queued, "running", MIN);
      expect(vmmPids(boxes.queued), why).toHaveLength(1);
      expect(taps(box.ip), why).toHaveLength(
        taps((await client.get(`/api/v1/boxes/${boxes.keeper}`)).body.ip).length,
      );
      expect(taps(box.ip).length, why).toBeLessThanOrEqual(1);
      expect(agent.ipAllocations, why).toBe(1);
      expect(site(boxes.queued), why).toBe(boxes.queued);
      expect(vmmPids(boxes.keeper)).toEqual([keeperPid]);
      await heartbeatAfter(client, Date.parse(play.endedAt));

      // As the next test expects it: the box stopped.
      const stop = await client.post(`/api/v1/boxes/${boxes.queued}/stop`);
      expect(stop.status, JSON.stringify(stop.body)).toBe(202);
      await waitBox(client, boxes.queued, "stopped", 5 * MIN);
      expect(vmmPids(boxes.queued)).toEqual([]);
      expect(taps(box.ip)).toEqual([]);
    },
    20 * MIN,
  );

  test(
    "Deploy agent (deploy-agent.yml) through the control plane: the box keeps its VMM, a queued job runs once after, the server stays disabled",
    async () => {
      const { server } = env();
      const client = await admin();
      expect((await client.post(`/api/v1/servers/${server}/actions`, { action: "disable" })).status).toBe(
        200,
      );
      const start = await client.post(`/api/v1/boxes/${boxes.queued}/start`);
      expect(start.status, JSON.stringify(start.body)).toBe(202);
      const jobId: string = start.body.job.id;
      const oldAgent = agentPid();
      const started = Date.now();
      const res = await client.post(`/api/v1/servers/${server}/plays`, {
        playbook: "deploy_agent",
        variables: {},
      });
      expect(res.status, JSON.stringify(res.body)).toBe(202);
      const play = await waitForPlay(client, res.body.id, undefined, 10 * MIN);
      timings.deployAgentPlayWithBoxes = Date.now() - started;
      expect(play.status, JSON.stringify(play.error)).toBe("success");
      expect(agentPid()).not.toBe(oldAgent);
      // A successful deploy does not undo the operator's disable.
      expect((await client.get(`/api/v1/servers/${server}`)).body.status).toBe("disabled");

      expect(vmmPids(boxes.keeper)).toEqual([keeperPid]);
      expect(site(boxes.keeper)).toBe(boxes.keeper);
      await heartbeatAfter(client, Date.parse(play.endedAt));
      expect((await jobOf(client, boxes.queued, jobId)).status).toBe("pending");

      expect((await client.post(`/api/v1/servers/${server}/actions`, { action: "activate" })).status).toBe(
        200,
      );
      const job = await waitJob(client, boxes.queued, jobId, 10 * MIN);
      ranOnce(job);
      expect(job.attempts).toBe(1);
      await waitBox(client, boxes.queued, "running", MIN);
      expect(vmmPids(boxes.queued)).toHaveLength(1);
      expect(site(boxes.queued)).toBe(boxes.queued);
      expect(vmmPids(boxes.keeper)).toEqual([keeperPid]);

      // Leave the host as the tests after this one expect it: no boxes.
      for (const slug of Object.values(boxes)) {
        expect((await client.del(`/api/v1/boxes/${slug}`)).status).toBe(202);
      }
      for (const slug of Object.values(boxes)) {
        const deadline = Date.now() + 5 * MIN;
        let res = await client.get(`/api/v1/boxes/${slug}`);
        while (res.status === 200 && res.body.status !== "deleted" && Date.now() < deadline) {
          await sleep(1000);
          res = await client.get(`/api/v1/boxes/${slug}`);
        }
        expect(res.status === 404 || res.body.status === "deleted", JSON.stringify(res.body)).toBe(true);
      }
      expect(vmmPids(boxes.keeper)).toEqual([]);
    },
    20 * MIN,
  );
}
