import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { buildBundle } from "../../../../provision/bundle/build-bundle.ts";
import { startControlPlane, type TestControlPlane } from "../../../api/test/support/control-plane.ts";
import { controlPlanePlays } from "./control-plane-plays.ts";
import { describeRun, runPlaybook } from "./support/ansible.ts";
import { REPO, startTestHost, type TestHost, testHostUnavailable } from "./support/test-host.ts";

/**
 * playbook.yml from scratch on a real Debian host (systemd-nspawn in our own netns, sshd,
 * apt through apt-cacher-ng), against a real control plane the host reaches over the veth.
 * One booted host is shared by every test here, in order.
 */
const unavailable = testHostUnavailable();
if (unavailable) console.warn(`[provision] SKIPPED: ${unavailable}`);

const SERVER = "prov-1";
const MIN = 60_000;

describe.skipIf(unavailable !== null)("provisioning a fresh Debian host with Ansible", () => {
  let cp: TestControlPlane;
  let host: TestHost;
  let vars: Record<string, unknown>;
  let firstToken: string;
  const timings: Record<string, number> = {};
  const admin = () => cp.admin();

  const play = (
    playbook: string,
    extra: { args?: string[]; vars?: Record<string, unknown>; controlPathDir?: string } = {},
  ) =>
    runPlaybook(playbook, {
      inventory: host.inventory,
      vars: { ...vars, ...extra.vars },
      args: extra.args ?? [],
      controlPathDir: extra.controlPathDir ?? path.join(host.runDir, "cp"),
      timeoutMs: 12 * MIN,
    });

  beforeAll(async () => {
    // One bundle for every run: the playbook builds it from the checkout when not given, but
    // a tree others edit meanwhile would give each run a new release. The control plane's
    // own plays (control-plane-plays.ts) use it too.
    const bundle = buildBundle({ out: path.join(REPO, ".data/provision/bundles") });
    cp = await startControlPlane({ config: { agentBundle: bundle.path } });
    const res = await (await admin()).post("/api/v1/servers", {
      name: SERVER,
      domain: "prov-1.boxes.test",
      backend: "qemu",
      capacity: { vcpu: 4, memoryMb: 4096, diskGb: 20 },
      publicScheme: "http",
    });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    firstToken = res.body.agentToken;
    host = await startTestHost();
    const cpPort = await host.forward(Number(new URL(cp.url).port));
    vars = {
      doppio_control_plane_url: `http://${host.hostIp}:${cpPort}`,
      doppio_server_name: SERVER,
      doppio_agent_token: res.body.agentToken,
      doppio_backend: "qemu",
      doppio_tls_mode: "http",
      doppio_domain: "prov-1.boxes.test",
      doppio_allow_tcg: true,
      doppio_known_hosts_file: host.knownHosts,
      doppio_agent_bundle: bundle.path,
    };
  }, 10 * MIN);

  afterAll(async () => {
    await host?.stop();
    await cp?.close();
    console.log(`[provision] timings (ms): ${JSON.stringify(timings)}`);
  });

  test(
    "playbook.yml turns the bare host into a server: agent healthy, golden ready, heartbeats arrive",
    async () => {
      const run = await play("playbook.yml");
      timings.first = run.ms;
      expect(run.code, describeRun(run)).toBe(0);
      // Machine-readable for the control plane: every stdout line is one JSON event.
      expect(run.stray).toEqual([]);
      expect(run.stats[host.name]).toMatchObject({ failures: 0, unreachable: 0 });
      expect(run.stats[host.name]!.changed).toBeGreaterThan(10);
      // Secrets never reach the callback's output.
      expect(run.stdout).not.toContain(String(vars.doppio_agent_token));
      const apiToken = host.ssh("cat /etc/doppio-agent/api-token").trim();
      expect(apiToken).toMatch(/^[0-9a-f]{64}$/);
      expect(run.stdout).not.toContain(apiToken);

      expect(host.ssh("systemctl is-active doppio-agent caddy").trim().split("\n")).toEqual([
        "active",
        "active",
      ]);
      const health = JSON.parse(host.ssh("curl -sf http://127.0.0.1:8090/health"));
      expect(health).toMatchObject({ ok: true, backend: "qemu" });
      const golden = JSON.parse(
        host.ssh(
          `curl -sf -H 'Authorization: Bearer ${apiToken}' http://127.0.0.1:8090/golden-snapshot/status`,
        ),
      );
      expect(golden.templates.minimal.status).toBe("ready");
      // The host key was recorded on first contact (trust on first use).
      const recorded = execFileSync("ssh-keygen", ["-F", host.ip, "-f", host.knownHosts], {
        encoding: "utf8",
      });
      expect(recorded).toContain("ssh-ed25519");
      // The agent reached the control plane through the veth.
      const client = await admin();
      const deadline = Date.now() + MIN;
      let server = (await client.get(`/api/v1/servers/${SERVER}`)).body;
      while (!server.lastHeartbeatAt && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 1000));
        server = (await client.get(`/api/v1/servers/${SERVER}`)).body;
      }
      expect(server.lastHeartbeatAt, JSON.stringify(server)).not.toBeNull();
    },
    15 * MIN,
  );

  test(
    "a second run changes nothing",
    async () => {
      const run = await play("playbook.yml");
      timings.second = run.ms;
      expect(run.code, describeRun(run)).toBe(0);
      expect(run.changedTasks).toEqual([]);
      expect(run.stats[host.name]).toMatchObject({ changed: 0, failures: 0 });
    },
    10 * MIN,
  );

  test(
    "--check --diff reports no drift",
    async () => {
      const run = await play("playbook.yml", { args: ["--check", "--diff"] });
      timings.check = run.ms;
      expect(run.code, describeRun(run)).toBe(0);
      expect(run.changedTasks).toEqual([]);
      expect(run.stats[host.name]).toMatchObject({ changed: 0, failures: 0 });
    },
    10 * MIN,
  );

  test(
    "verify.yml's checklist passes on the provisioned host",
    async () => {
      const run = await play("verify.yml");
      timings.verify = run.ms;
      expect(run.code, describeRun(run)).toBe(0);
      expect(run.stats[host.name]).toMatchObject({ changed: 0, failures: 0 });
    },
    5 * MIN,
  );

  test(
    "the kvm role refuses a host without KVM unless TCG is allowed",
    async () => {
      const run = await play("playbook.yml", { args: ["--tags", "kvm"], vars: { doppio_allow_tcg: false } });
      expect(run.code).not.toBe(0);
      expect(run.failures.join("\n")).toMatch(
        /KVM is not usable .*\/dev\/kvm does not exist.*doppio_allow_tcg: true/s,
      );
    },
    2 * MIN,
  );

  test(
    "a changed host key stops the run (keys are pinned, not ignored)",
    async () => {
      const forged = path.join(host.runDir, "known_hosts.forged");
      const otherKey = path.join(host.runDir, "other_host_key");
      execFileSync("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", otherKey]);
      const pub = readFileSync(`${otherKey}.pub`, "utf8").split(" ").slice(0, 2).join(" ");
      writeFileSync(forged, `${host.ip} ${pub}\n`);
      // A fresh connection: an open SSH master from the runs above would skip the key check.
      const controlPathDir = path.join(host.runDir, "cp-forged");
      mkdirSync(controlPathDir);
      const run = await play("verify.yml", { vars: { doppio_known_hosts_file: forged }, controlPathDir });
      expect(run.code).not.toBe(0);
      expect(run.stats[host.name]).toMatchObject({ unreachable: 1 });
      expect(run.failures.join("\n")).toMatch(
        /REMOTE HOST IDENTIFICATION HAS CHANGED|Host key verification failed/,
      );
    },
    2 * MIN,
  );

  // Last: these change the host's agent token and leave the server in error on purpose (then retry).
  controlPlanePlays(
    () => ({
      cp,
      host,
      server: SERVER,
      controlPlaneUrl: String(vars.doppio_control_plane_url),
      firstToken,
      vars,
    }),
    timings,
  );
});
