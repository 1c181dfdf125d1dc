import { copyFileSync, mkdtempSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { registerServer, signedInClient, type TestClient } from "./support/client.ts";
import { freshPostgresDatabase, POSTGRES_URL, startControlPlane } from "./support/control-plane.ts";
import { describeOnEachDb } from "./support/each-db.ts";
import { ansibleMissing, processesMentioning, readPlayStream, waitForPlay } from "./support/plays.ts";
import { freePort } from "./support/ports.ts";

/**
 * Plays the control plane runs with a real ansible-playbook: the real playbooks against an
 * SSH target that cannot be a host (a closed loopback port: unreachable at once), and
 * playbooks that wait until stopped (cancel, restart). Plays on a real Debian host:
 * apps/agent/test/provision/control-plane-plays.ts.
 */
const REPO_ANSIBLE = path.resolve(import.meta.dirname, "../../../provision/ansible");
const missing = ansibleMissing();
if (missing) console.warn(`[plays] SKIPPED: ${missing}`);

if (!missing)
  describeOnEachDb("Ansible plays", (env) => {
    let admin: TestClient;
    let user: TestClient;
    beforeAll(async () => {
      admin = await env().admin();
      user = await signedInClient(env().url);
    });

    it("has its own SSH key: private half 0600 in the data dir, public half for admins only", async () => {
      const res = await admin.get("/api/v1/admin/ssh-key");
      expect(res.status).toBe(200);
      expect(res.body.publicKey).toMatch(/^ssh-ed25519 \S+ doppiobox-control-plane$/);
      expect(res.body.fingerprint).toMatch(/^SHA256:/);
      const key = path.join(env().cp.ctx.config.dataDir, "ssh", "id_ed25519");
      expect(statSync(key).mode & 0o777).toBe(0o600);
      expect((await user.get("/api/v1/admin/ssh-key")).status).toBe(403);
    });

    it("refuses a play before the host's SSH address is set, and lets no tenant near any of it", async () => {
      await registerServer(admin, "pl-nossh", { status: "pending" });
      // Not set is a state, not an error: the dashboard asks for every server.
      expect((await admin.get("/api/v1/servers/pl-nossh/ssh")).body).toEqual({ ssh: null });
      expect((await admin.get("/api/v1/servers/pl-unknown/ssh")).status).toBe(404);
      const res = await admin.post("/api/v1/servers/pl-nossh/plays", { playbook: "prepare" });
      expect(res.status).toBe(409);
      expect(res.body.error.message).toContain("SSH");
      const port = await freePort();
      for (const [method, url, body] of [
        ["POST", "/api/v1/servers/pl-nossh/ssh", { host: "127.0.0.1", port, user: "root" }],
        ["GET", "/api/v1/servers/pl-nossh/ssh", undefined],
        ["POST", "/api/v1/servers/pl-nossh/plays", { playbook: "prepare" }],
        ["GET", "/api/v1/servers/pl-nossh/plays", undefined],
      ] as const) {
        const r = await user.request(method, url, body);
        expect(r.status, `${method} ${url}`).toBe(403);
      }
    });

    it("takes only its closed list of variables (no ansible_connection=local onto the control plane)", async () => {
      await registerServer(admin, "pl-vars", { status: "pending" });
      await admin.post("/api/v1/servers/pl-vars/ssh", { host: "127.0.0.1", port: 22, user: "root" });
      for (const variables of [
        { ansible_connection: "local" },
        { allowTcg: "yes" },
        { doppio_agent_token: "x" },
      ]) {
        const res = await admin.post("/api/v1/servers/pl-vars/plays", { playbook: "prepare", variables });
        expect(res.status, JSON.stringify(variables)).toBe(400);
      }
      expect((await admin.post("/api/v1/servers/pl-vars/plays", { playbook: "reboot" })).status).toBe(400);
      expect((await admin.get("/api/v1/servers/pl-vars/plays")).body.plays).toEqual([]);
      // Nor an option smuggled into ssh's command line through the address or user.
      for (const ssh of [
        { host: "-oProxyCommand=touch /tmp/x", port: 22, user: "root" },
        { host: "h", port: 22, user: "root -oProxyCommand=x" },
      ]) {
        expect((await admin.post("/api/v1/servers/pl-vars/ssh", ssh)).status).toBe(400);
      }
    });

    it("records a play against an unreachable host: failure, its task unreachable, the server in error", async () => {
      await registerServer(admin, "pl-down", { status: "pending" });
      const port = await freePort();
      const ssh = await admin.post("/api/v1/servers/pl-down/ssh", { host: "127.0.0.1", port, user: "root" });
      expect(ssh.status).toBe(200);
      expect(ssh.body).toMatchObject({ host: "127.0.0.1", port, user: "root", hostKeys: null });
      const start = await admin.post("/api/v1/servers/pl-down/plays", {
        playbook: "prepare",
        variables: { allowTcg: true },
      });
      expect(start.status, JSON.stringify(start.body)).toBe(202);
      expect(start.body).toMatchObject({ server: "pl-down", playbook: "prepare", status: "pending" });
      // The secret is stored redacted, the rest as passed.
      expect(start.body.variables).toMatchObject({
        doppio_agent_token: "[redacted]",
        doppio_server_name: "pl-down",
        doppio_allow_tcg: true,
        ansible_host: "127.0.0.1",
      });
      expect((await admin.get("/api/v1/servers/pl-down")).body.status).toBe("preparing");

      const play = await waitForPlay(admin, start.body.id);
      expect(play.status).toBe("failure");
      expect(play.counters).toMatchObject({ unreachable: 1, failed: 0, changed: 0 });
      const facts = play.tasks.find((t: any) => t.name === "Gathering Facts");
      expect(facts).toMatchObject({ status: "unreachable" });
      expect(facts.error).toMatch(/Connection refused|connect to host/);
      expect(play.error).toContain("Gathering Facts: ");
      expect(play.error).toMatch(/Connection refused|connect to host/);
      // Planned tasks that never ran stay pending: the fraction shows how far it got.
      expect(play.progress.total).toBeGreaterThan(20);
      expect(play.progress.done).toBe(1);
      expect(play.tasks.filter((t: any) => t.status === "pending").length).toBe(play.progress.total - 1);
      expect(play.tasks.some((t: any) => t.role === "common" && t.name.length > 0)).toBe(true);
      const server = (await admin.get("/api/v1/servers/pl-down")).body;
      expect(server.status).toBe("error");
      expect(server.statusMessage).toContain("Prepare server: Gathering Facts: ");
      // The secrets file did not outlive the play.
      expect(() => statSync(path.join(env().cp.ctx.config.dataDir, "plays", play.id, "vars.json"))).toThrow();
      const list = (await admin.get("/api/v1/servers/pl-down/plays")).body.plays;
      expect(list.map((p: any) => p.id)).toEqual([play.id]);
      expect((await user.get(`/api/v1/plays/${play.id}`)).status).toBe(403);
    });
  });

/**
 * Playbooks that wait on the controller until stopped (a `pause` in a worker process), with
 * the real ansible.cfg and callback: a play that is still running whenever the test acts.
 */
function waitingAnsibleDir(): string {
  const dir = mkdtempSync(path.join(tmpdir(), "doppio-ansible-wait-"));
  copyFileSync(path.join(REPO_ANSIBLE, "ansible.cfg"), path.join(dir, "ansible.cfg"));
  symlinkSync(path.join(REPO_ANSIBLE, "callback_plugins"), path.join(dir, "callback_plugins"));
  for (const playbook of ["playbook.yml", "deploy-agent.yml"])
    writeFileSync(
      path.join(dir, playbook),
      "- name: Wait\n  hosts: doppio_hosts\n  gather_facts: false\n  tasks:\n    - name: Wait for the test\n      ansible.builtin.pause:\n        seconds: 300\n",
    );
  return dir;
}
const WAITING = missing ? "" : waitingAnsibleDir();
afterAll(() => {
  if (WAITING) rmSync(WAITING, { recursive: true, force: true });
});

if (!missing)
  describeOnEachDb(
    "Ansible plays that wait until stopped",
    (env) => {
      let admin: TestClient;
      let user: TestClient;
      beforeAll(async () => {
        admin = await env().admin();
        user = await signedInClient(env().url);
      });

      it("runs one play per server at a time, streams it, and cancel stops its process group", async () => {
        await registerServer(admin, "pl-hang", { status: "active" });
        await admin.post("/api/v1/servers/pl-hang/ssh", {
          host: "127.0.0.1",
          port: await freePort(),
          user: "root",
        });
        const start = await admin.post("/api/v1/servers/pl-hang/plays", { playbook: "deploy_agent" });
        expect(start.status).toBe(202);
        const id = start.body.id;
        const again = await admin.post("/api/v1/servers/pl-hang/plays", { playbook: "prepare" });
        expect(again.status).toBe(409);
        expect(again.body.error.message).toContain("already");
        const streamed = readPlayStream(admin, id);
        await waitForPlay(admin, id, (p) => p.tasks.some((t: any) => t.status === "running"));
        const workDir = path.join(env().cp.ctx.config.dataDir, "plays", id);
        expect(processesMentioning(workDir).length).toBeGreaterThan(0);
        expect((await user.post(`/api/v1/plays/${id}/cancel`)).status).toBe(403);
        const cancel = await admin.post(`/api/v1/plays/${id}/cancel`);
        expect(cancel.status).toBe(200);
        const play = await waitForPlay(admin, id);
        expect(play.status).toBe("cancelled");
        expect(play.error).toBe("cancelled by an administrator");
        expect(play.tasks.find((t: any) => t.name === "Wait for the test").status).toBe("cancelled");
        expect(processesMentioning(workDir)).toEqual([]);
        // Cancelling a Deploy leaves the server as it was.
        expect((await admin.get("/api/v1/servers/pl-hang")).body.status).toBe("active");
        expect((await admin.post(`/api/v1/plays/${id}/cancel`)).status).toBe(409);

        const events = await streamed;
        const last = events.at(-1)!;
        expect(last).toMatchObject({ event: "play", data: { id, status: "cancelled" } });
        expect(events.some((e) => e.event === "task" && e.data.status === "running")).toBe(true);
        expect(events.some((e) => e.event === "play" && e.data.status === "running")).toBe(true);
      });
    },
    { ansibleDir: WAITING },
  );

/**
 * Playbooks whose one task fails until the operator fixes the cause (a file on the
 * controller: `fail` and the `exists` test run there, no host needed), with the real
 * ansible.cfg and callback: a failed play, then a retry from `error` that succeeds.
 */
function fixableAnsibleDir(): { dir: string; fix: string } {
  const dir = mkdtempSync(path.join(tmpdir(), "doppio-ansible-fixable-"));
  const fix = path.join(dir, "fixed");
  copyFileSync(path.join(REPO_ANSIBLE, "ansible.cfg"), path.join(dir, "ansible.cfg"));
  symlinkSync(path.join(REPO_ANSIBLE, "callback_plugins"), path.join(dir, "callback_plugins"));
  for (const playbook of ["playbook.yml", "deploy-agent.yml"])
    writeFileSync(
      path.join(dir, playbook),
      `- name: Fixable\n  hosts: doppio_hosts\n  gather_facts: false\n  tasks:\n    - name: Check the mirror\n      ansible.builtin.fail:\n        msg: the package mirror answered 503\n      when: not ("${fix}" is exists)\n`,
    );
  return { dir, fix };
}
const FIXABLE = missing ? null : fixableAnsibleDir();
afterAll(() => {
  if (FIXABLE) rmSync(FIXABLE.dir, { recursive: true, force: true });
});

if (FIXABLE)
  describeOnEachDb(
    "Ansible plays that fail, then succeed once the cause is fixed",
    (env) => {
      it("a failed play puts the server in error with its task's message; Prepare or Deploy again from error makes it active", async () => {
        rmSync(FIXABLE.fix, { force: true });
        const admin = await env().admin();
        await registerServer(admin, "pl-retry", { status: "pending" });
        await admin.post("/api/v1/servers/pl-retry/ssh", { host: "127.0.0.1", port: 22, user: "root" });

        const first = await admin.post("/api/v1/servers/pl-retry/plays", { playbook: "prepare" });
        expect(first.status, JSON.stringify(first.body)).toBe(202);
        const failed = await waitForPlay(admin, first.body.id);
        expect(failed).toMatchObject({
          status: "failure",
          error: "Check the mirror: the package mirror answered 503",
        });
        expect(failed.counters).toMatchObject({ failed: 1 });
        expect(failed.tasks).toMatchObject([
          { name: "Check the mirror", status: "failed", error: "the package mirror answered 503" },
        ]);
        const broken = (await admin.get("/api/v1/servers/pl-retry")).body;
        expect(broken).toMatchObject({
          status: "error",
          statusMessage: "Prepare server: Check the mirror: the package mirror answered 503",
        });
        // What the Servers page and the list show.
        const listed = (await admin.get("/api/v1/servers")).body.servers.find(
          (s: { name: string }) => s.name === "pl-retry",
        );
        expect(listed).toMatchObject({ status: "error", statusMessage: broken.statusMessage });

        // The operator fixes the cause and runs Prepare again, from `error`.
        writeFileSync(FIXABLE.fix, "");
        const second = await admin.post("/api/v1/servers/pl-retry/plays", { playbook: "prepare" });
        expect(second.status, JSON.stringify(second.body)).toBe(202);
        expect((await admin.get("/api/v1/servers/pl-retry")).body.status).toBe("preparing");
        const ok = await waitForPlay(admin, second.body.id);
        expect(ok).toMatchObject({ status: "success", error: null });
        expect(ok.tasks).toMatchObject([{ name: "Check the mirror", status: "skipped" }]);
        expect((await admin.get("/api/v1/servers/pl-retry")).body).toMatchObject({
          status: "active",
          statusMessage: null,
        });

        // A Deploy does not pass through `preparing`: its success itself leaves `error`.
        rmSync(FIXABLE.fix);
        const deploy = await admin.post("/api/v1/servers/pl-retry/plays", { playbook: "deploy_agent" });
        expect((await waitForPlay(admin, deploy.body.id)).status).toBe("failure");
        expect((await admin.get("/api/v1/servers/pl-retry")).body).toMatchObject({
          status: "error",
          statusMessage: "Deploy agent: Check the mirror: the package mirror answered 503",
        });
        writeFileSync(FIXABLE.fix, "");
        const redeploy = await admin.post("/api/v1/servers/pl-retry/plays", { playbook: "deploy_agent" });
        expect((await admin.get("/api/v1/servers/pl-retry")).body.status).toBe("error");
        expect((await waitForPlay(admin, redeploy.body.id)).status).toBe("success");
        expect((await admin.get("/api/v1/servers/pl-retry")).body).toMatchObject({
          status: "active",
          statusMessage: null,
        });
      });
    },
    { ansibleDir: FIXABLE.dir },
  );

/**
 * A control plane that dies mid-play (no shutdown) leaves a running row and an orphaned
 * ansible-playbook; the next one to start on the same database ends the play as
 * `failure: interrupted` and kills the orphan. Two control planes on one database need
 * PostgreSQL (PGlite's directory is one process's).
 */
const noPostgres = POSTGRES_URL ? null : "TEST_DATABASE_URL is not set (make test starts PostgreSQL)";
if (noPostgres) console.warn(`[plays restart] SKIPPED: ${noPostgres}`);
describe.skipIf(missing !== null || noPostgres !== null)("a control-plane restart during a play", () => {
  it("ends the play failed: interrupted and stops what it left running", async () => {
    const db = await freshPostgresDatabase();
    const dataDir = await mkdtemp(path.join(tmpdir(), "doppio-cp-restart-"));
    const config = { databaseUrl: db.url, ansibleDir: WAITING };
    const first = await startControlPlane({ dataDir, config });
    let second: Awaited<ReturnType<typeof startControlPlane>> | undefined;
    try {
      const admin = await first.admin();
      await registerServer(admin, "pl-restart", { status: "active" });
      await admin.post("/api/v1/servers/pl-restart/ssh", {
        host: "127.0.0.1",
        port: 22,
        user: "root",
      });
      const start = await admin.post("/api/v1/servers/pl-restart/plays", { playbook: "deploy_agent" });
      const id = start.body.id;
      await waitForPlay(admin, id, (p) => p.tasks.some((t: any) => t.status === "running"));
      const workDir = path.join(dataDir, "plays", id);
      expect(processesMentioning(workDir).length).toBeGreaterThan(0);

      // The first control plane is gone as far as anyone can tell: a new one starts.
      second = await startControlPlane({ dataDir, config });
      const play = (await (await second.admin()).get(`/api/v1/plays/${id}`)).body;
      expect(play).toMatchObject({
        status: "failure",
        error: "interrupted: the control plane restarted during the play",
      });
      const server = (await (await second.admin()).get("/api/v1/servers/pl-restart")).body;
      expect(server).toMatchObject({ status: "error" });
      expect(server.statusMessage).toContain("interrupted");
      const deadline = Date.now() + 10_000;
      while (processesMentioning(workDir).length > 0 && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 100));
      expect(processesMentioning(workDir)).toEqual([]);
    } finally {
      await second?.close();
      await first.close();
      await db.drop();
      await rm(dataDir, { recursive: true, force: true });
    }
  }, 60_000);
});
