import { execFileSync, spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import path from "node:path";
import { expect, test } from "vitest";
import { buildBundle } from "../../../../provision/bundle/build-bundle.ts";
import type { TestControlPlane } from "../../../api/test/support/control-plane.ts";
import { processesMentioning, readPlayStream, waitForPlay } from "../../../api/test/support/plays.ts";
import { deployKeepsWork } from "./deploy-keeps-work.ts";
import { REPO, type TestHost } from "./support/test-host.ts";

/**
 * The control plane runs the playbooks itself (Prepare server, Deploy agent) on the shared
 * booted host of playbook.test.ts, which calls this after its own tests, when the host is a
 * provisioned server. Registered as tests of that file so the one host serves both.
 */
export function controlPlanePlays(
  env: () => {
    cp: TestControlPlane;
    host: TestHost;
    server: string;
    controlPlaneUrl: string;
    firstToken: string;
    /** The inputs the test's own playbook runs use. */
    vars: Record<string, unknown>;
  },
  timings: Record<string, number>,
): void {
  const MIN = 60_000;
  const admin = () => env().cp.admin();
  const play = async (playbook: string, variables: Record<string, unknown> = {}) => {
    const res = await (await admin()).post(`/api/v1/servers/${env().server}/plays`, { playbook, variables });
    expect(res.status, JSON.stringify(res.body)).toBe(202);
    return res.body.id as string;
  };

  test("an admin installs the control plane's public key on the host and sets its SSH address", async () => {
    const { host, server, controlPlaneUrl } = env();
    const client = await admin();
    const key = (await client.get("/api/v1/admin/ssh-key")).body.publicKey as string;
    host.ssh(`echo '${key}' >> /root/.ssh/authorized_keys`);
    const res = await client.post(`/api/v1/servers/${server}/ssh`, {
      host: host.ip,
      port: 22,
      user: "root",
      controlPlaneUrl,
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.hostKeys).toBeNull();
  });

  test(
    "Deploy agent through the API: tasks stream as they run, the agent comes back on a new token",
    async () => {
      const { cp, host, server, firstToken } = env();
      const client = await admin();
      const started = Date.now();
      const id = await play("deploy_agent");
      const events = await readPlayStream(client, id);
      timings.deployAgentThroughApi = Date.now() - started;
      const result = (await client.get(`/api/v1/plays/${id}`)).body;
      expect(
        result.status,
        JSON.stringify({ error: result.error, tasks: result.tasks.filter((t: any) => t.error) }),
      ).toBe("success");
      // Live: task starts and results and a growing fraction arrived before the end.
      const fractions = events
        .filter((e) => e.event === "play" && e.data.status === "running")
        .map((e) => e.data.progress.done);
      expect(fractions.length).toBeGreaterThan(3);
      expect(fractions.some((d) => d > 0 && d < result.progress.total)).toBe(true);
      expect(events.filter((e) => e.event === "task" && e.data.status === "running").length).toBeGreaterThan(
        5,
      );
      expect(result.progress).toEqual({ done: result.tasks.length, total: result.tasks.length });
      expect(result.tasks.every((t: any) => !["pending", "running"].includes(t.status))).toBe(true);
      expect(result.tasks.map((t: any) => t.position)).toEqual(
        [...result.tasks.map((t: any) => t.position)].sort((a: number, b: number) => a - b),
      );
      // Counters are the callback's stats; they agree with the tasks' own results.
      const count = (s: string) => result.tasks.filter((t: any) => t.status === s).length;
      // (Ansible counts a changed result as ok too.)
      expect(result.counters).toEqual({
        ok: count("ok") + count("changed"),
        changed: count("changed"),
        failed: 0,
        skipped: count("skipped"),
        unreachable: 0,
        rescued: 0,
        ignored: 0,
      });
      expect(result.counters.changed).toBeGreaterThan(0); // a new token: new config, a restart
      const health = result.tasks.find((t: any) => t.name === "Wait for the agent's /health");
      expect(health).toMatchObject({ status: "ok", role: "agent" });
      expect(health.durationMs).toBeGreaterThanOrEqual(0);

      // Secrets: the token the play handed the host, and the agent's API token, appear nowhere.
      const envFile = host.ssh("cat /etc/doppio-agent/agent.env");
      const newToken = /dpa_[A-Za-z0-9_-]{43}/.exec(envFile)?.[0];
      expect(newToken).toBeDefined();
      expect(newToken).not.toBe(firstToken);
      const apiToken = host.ssh("cat /etc/doppio-agent/api-token").trim();
      const stored = JSON.stringify([
        result,
        events,
        (await client.get(`/api/v1/servers/${server}/plays`)).body,
      ]);
      expect(stored).not.toContain(newToken);
      expect(stored).not.toContain(apiToken);
      expect(result.variables.doppio_agent_token).toBe("[redacted]");

      // The agent runs on the new token, which replaced the old one, and the server is active.
      const deadline = Date.now() + 2 * MIN;
      let srv = (await client.get(`/api/v1/servers/${server}`)).body;
      while (
        !(srv.lastHeartbeatAt && Date.parse(srv.lastHeartbeatAt) > Date.parse(result.endedAt)) &&
        Date.now() < deadline
      ) {
        await new Promise((r) => setTimeout(r, 1000));
        srv = (await client.get(`/api/v1/servers/${server}`)).body;
      }
      expect(srv).toMatchObject({ status: "active", statusMessage: null });
      expect(Date.parse(srv.lastHeartbeatAt)).toBeGreaterThan(Date.parse(result.endedAt));
      const old = await fetch(new URL("/agent/v1/heartbeat", cp.url), {
        method: "POST",
        headers: { authorization: `Bearer ${firstToken}`, "content-type": "application/json" },
        body: "{}",
      });
      expect(old.status).toBe(401);

      // Trust on first use: the key met on first contact is recorded and is the host's own.
      const { ssh } = (await client.get(`/api/v1/servers/${server}/ssh`)).body;
      const hostKey = host.ssh("cat /etc/ssh/ssh_host_ed25519_key.pub").split(" ").slice(0, 2).join(" ");
      expect(ssh.hostKeys).toContain(hostKey.split(" ")[1]);
      expect(processesMentioning(path.join(cp.cp.ctx.config.dataDir, "plays", id))).toEqual([]);
    },
    10 * MIN,
  );

  test(
    "scripts/deploy-agent.sh: --dry-run changes nothing; then a new release runs and the agent is active",
    async () => {
      const { host } = env();
      const bundle = buildBundle({
        out: path.join(REPO, ".data/provision/bundles"),
        label: "deploy-agent.sh test",
      });
      const before = host.ssh("readlink /opt/doppio").trim();
      expect(before).not.toContain(bundle.id);
      const args = [
        "--target",
        `root@${host.ip}`,
        "--identity",
        host.sshKey,
        "--known-hosts",
        host.knownHosts,
        "--bundle",
        bundle.path,
      ];
      const script = path.join(REPO, "scripts/deploy-agent.sh");
      const dry = spawnSync(script, [...args, "--dry-run"], { encoding: "utf8" });
      expect(dry.status, dry.stderr).toBe(0);
      expect(dry.stdout).toMatch(/^\+ scp .*doppio-agent-/m);
      expect(dry.stdout).toMatch(/^\+ ssh .*systemctl restart doppio-agent/m);
      expect(host.ssh("readlink /opt/doppio").trim()).toBe(before);
      const started = Date.now();
      const real = spawnSync(script, args, { encoding: "utf8" });
      timings.deployAgentSh = Date.now() - started;
      expect(real.status, real.stderr).toBe(0);
      expect(real.stdout.trim().split("\n").at(-1)).toBe("active");
      expect(host.ssh("readlink /opt/doppio").trim()).toBe(`/opt/doppio-releases/${bundle.id}`);
      expect(JSON.parse(host.ssh("curl -sf http://127.0.0.1:8090/health"))).toMatchObject({ ok: true });
    },
    5 * MIN,
  );

  // A live host with boxes and queued work: a deploy loses none of it.
  deployKeepsWork(() => {
    const { cp, host, server, vars } = env();
    return { cp, host, server, domain: String(vars.doppio_domain) };
  }, timings);

  test(
    "scripts/setup-from-rescue.sh refuses a host that is not in a rescue system",
    () => {
      const { host } = env();
      const r = spawnSync(
        path.join(REPO, "scripts/setup-from-rescue.sh"),
        ["--target", `root@${host.ip}`, "--hostname", "prov-1", "--identity", host.sshKey],
        { encoding: "utf8", env: { ...process.env, HOME: host.runDir } },
      );
      expect(r.status).toBe(3);
      expect(r.stderr).toContain("is not in a rescue system");
      expect(host.ssh("test -e /tmp/doppio-installimage.conf && echo yes || echo no").trim()).toBe("no");
    },
    MIN,
  );

  test(
    "scripts/setup-from-rescue.sh on the test host posing as a rescue system: installimage, reboot, playbook",
    () => {
      const { host, vars } = env();
      // The stand-ins: a rescue motd, an installimage that records its call and config, and a
      // reboot that records, "boots the installed system" (a plain motd) and restarts sshd.
      // The container's root is a directory on this machine: the stand-ins are written there.
      const root = path.join(host.runDir, "root");
      host.ssh("cp /etc/motd /root/motd.orig");
      writeFileSync(path.join(root, "etc/motd"), "Welcome to the Hetzner Rescue System.\n");
      writeFileSync(
        path.join(root, "usr/local/sbin/installimage"),
        '#!/bin/sh\necho "$*" >> /root/installimage.calls\nwhile getopts "ac:t:" o; do [ "$o" = c ] && cp "$OPTARG" /root/installimage.conf; done\nexit 0\n',
        { mode: 0o755 },
      );
      writeFileSync(
        path.join(root, "usr/local/sbin/reboot"),
        "#!/bin/sh\necho reboot >> /root/installimage.calls\ncp /root/motd.orig /etc/motd\n(sleep 1; systemctl restart ssh) >/dev/null 2>&1 &\n",
        { mode: 0o755 },
      );
      try {
        const varsFile = path.join(host.runDir, "rescue-vars.json");
        writeFileSync(varsFile, JSON.stringify(vars));
        const known = path.join(host.runDir, "rescue_known_hosts");
        const r = spawnSync(
          path.join(REPO, "scripts/setup-from-rescue.sh"),
          [
            ...["--target", `root@${host.ip}`, "--hostname", "prov-1", "--drives", "nvme0n1,nvme1n1"],
            ...["--identity", host.sshKey, "--known-hosts", known, "--wait", "60", "--"],
            ...["-e", `@${varsFile}`, "--tags", "kvm"],
          ],
          { encoding: "utf8", env: { ...process.env, ANSIBLE_FORCE_COLOR: "0" }, timeout: 5 * MIN },
        );
        expect(r.status, r.stderr + r.stdout).toBe(0);
        const calls = host.ssh("cat /root/installimage.calls").trim().split("\n");
        expect(calls).toEqual(["-a -c /tmp/doppio-installimage.conf -t yes", "reboot"]);
        const conf = host.ssh("cat /root/installimage.conf");
        for (const line of [
          "DRIVE1 /dev/nvme0n1",
          "DRIVE2 /dev/nvme1n1",
          "SWRAID 1",
          "SWRAIDLEVEL 1",
          "HOSTNAME prov-1",
          "PART lvm vg0 all",
          "LV vg0 root / ext4 60G",
          "LV vg0 doppio /var/lib/doppio-agent ext4 all",
        ])
          expect(conf).toContain(line);
        // The playbook ran against the installed system (here: its kvm role, TCG allowed).
        expect(r.stdout).toMatch(/prov-1\s*: ok=\d+ .*failed=0/);
        expect(r.stderr).toContain("done: prov-1 is prepared");
      } finally {
        host.ssh(
          "cp /root/motd.orig /etc/motd; rm -f /usr/local/sbin/installimage /usr/local/sbin/reboot /root/installimage.* /tmp/doppio-installimage.conf",
        );
      }
    },
    6 * MIN,
  );

  test(
    "a failing task fails the play with that task's message, and the server shows it",
    async () => {
      const client = await admin();
      // This host has no KVM: the kvm role refuses unless TCG is allowed.
      const id = await play("prepare", { allowTcg: false });
      const result = await waitForPlay(client, id, undefined, 10 * MIN);
      expect(result.status).toBe("failure");
      const failed = result.tasks.filter((t: any) => t.status === "failed");
      expect(failed.map((t: any) => [t.role, t.name])).toEqual([
        ["kvm", "Fail without KVM unless TCG is allowed"],
      ]);
      expect(failed[0].error).toMatch(/KVM is not usable .*\/dev\/kvm does not exist/s);
      expect(result.error).toBe(`Fail without KVM unless TCG is allowed: ${failed[0].error}`);
      expect(result.counters.failed).toBe(1);
      // any_errors_fatal: nothing after it ran.
      const after = result.tasks.filter((t: any) => t.position > failed[0].position && !t.handler);
      expect(after.length).toBeGreaterThan(10);
      expect(after.every((t: any) => t.status === "pending")).toBe(true);
      const srv = (await client.get(`/api/v1/servers/${env().server}`)).body;
      expect(srv.status).toBe("error");
      expect(srv.statusMessage).toBe(`Prepare server: ${result.error}`);
      // The play used the pinned host key (a mismatch would have made it unreachable).
      expect(result.counters.unreachable).toBe(0);
    },
    10 * MIN,
  );

  test(
    "cancel stops a running Prepare: its processes end, the play says cancelled",
    async () => {
      const { cp } = env();
      const client = await admin();
      const id = await play("prepare", { allowTcg: true });
      await waitForPlay(client, id, (p) => p.progress.done >= 3, 5 * MIN);
      const workDir = path.join(cp.cp.ctx.config.dataDir, "plays", id);
      expect(processesMentioning(workDir).length).toBeGreaterThan(0);
      expect((await client.post(`/api/v1/plays/${id}/cancel`)).status).toBe(200);
      const result = await waitForPlay(client, id, undefined, MIN);
      expect(result).toMatchObject({ status: "cancelled", error: "cancelled by an administrator" });
      expect(result.tasks.some((t: any) => t.status === "pending")).toBe(true);
      expect(result.tasks.some((t: any) => t.status === "running")).toBe(false);
      expect(processesMentioning(workDir)).toEqual([]);
      expect(execFileSync("ps", ["-eo", "args="], { encoding: "utf8" })).not.toContain(workDir);
      const srv = (await client.get(`/api/v1/servers/${env().server}`)).body;
      expect(srv).toMatchObject({
        status: "error",
        statusMessage: "Prepare server: cancelled by an administrator",
      });
    },
    10 * MIN,
  );

  test(
    "Prepare again from error: the play succeeds, the server is active again with its message cleared",
    async () => {
      const client = await admin();
      expect((await client.get(`/api/v1/servers/${env().server}`)).body.status).toBe("error");
      const started = Date.now();
      const id = await play("prepare", { allowTcg: true });
      const result = await waitForPlay(client, id, undefined, 15 * MIN);
      timings.prepareAgainFromError = Date.now() - started;
      expect(
        result.status,
        JSON.stringify({ error: result.error, tasks: result.tasks.filter((t: any) => t.error) }),
      ).toBe("success");
      const deadline = Date.now() + 2 * MIN;
      let srv = (await client.get(`/api/v1/servers/${env().server}`)).body;
      while (
        !(srv.lastHeartbeatAt && Date.parse(srv.lastHeartbeatAt) > Date.parse(result.endedAt)) &&
        Date.now() < deadline
      ) {
        await new Promise((r) => setTimeout(r, 1000));
        srv = (await client.get(`/api/v1/servers/${env().server}`)).body;
      }
      expect(srv).toMatchObject({ status: "active", statusMessage: null });
      expect(Date.parse(srv.lastHeartbeatAt)).toBeGreaterThan(Date.parse(result.endedAt));
    },
    20 * MIN,
  );
}
