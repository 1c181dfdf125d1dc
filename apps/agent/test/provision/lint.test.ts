import { execFileSync, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, test } from "vitest";
import { describeRun, runPlaybook } from "./support/ansible.ts";
import { ANSIBLE_DIR, ansibleUnavailable } from "./support/test-host.ts";

const unavailable = ansibleUnavailable();
if (unavailable) console.warn(`[provision lint] SKIPPED: ${unavailable}`);
const PLAYBOOKS = ["playbook.yml", "deploy-agent.yml", "deploy.yml", "verify.yml"];
const env = {
  ...process.env,
  ANSIBLE_CONFIG: path.join(ANSIBLE_DIR, "ansible.cfg"),
  ANSIBLE_FORCE_COLOR: "0",
};

describe.skipIf(unavailable !== null)("Ansible sources", () => {
  test.each(PLAYBOOKS)("%s passes ansible-playbook --syntax-check", (playbook) => {
    const r = spawnSync("ansible-playbook", ["-i", "inventory.example.ini", "--syntax-check", playbook], {
      cwd: ANSIBLE_DIR,
      env,
      encoding: "utf8",
    });
    expect(r.status, r.stderr + r.stdout).toBe(0);
  });

  test("ansible-lint (Debian's 6.13, production profile) is clean", () => {
    const r = spawnSync("ansible-lint", ["--nocolor", "-p"], { cwd: ANSIBLE_DIR, env, encoding: "utf8" });
    expect(r.status, r.stdout + r.stderr).toBe(0);
  }, 120_000);
});

/** The firecracker role's pinned-checksum download, on this machine, against a local file URL. */
describe.skipIf(unavailable !== null)("firecracker role", () => {
  const dir = mkdtempSync(path.join(tmpdir(), "doppio-fc-role-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const version = "v0.0.1-test";
  const release = path.join(dir, "src", `release-${version}-x86_64`);
  mkdirSync(release, { recursive: true });
  for (const bin of ["firecracker", "jailer"]) {
    writeFileSync(path.join(release, `${bin}-${version}-x86_64`), `#!/bin/sh\necho ${bin} ${version}\n`, {
      mode: 0o755,
    });
  }
  const tgz = path.join(dir, "firecracker.tgz");
  execFileSync("tar", ["-czf", tgz, "-C", path.join(dir, "src"), `release-${version}-x86_64`]);
  const sha = execFileSync("sha256sum", [tgz], { encoding: "utf8" }).split(" ")[0]!;
  const inventory = path.join(dir, "inventory.ini");
  writeFileSync(
    inventory,
    "[doppio_hosts]\nlocal ansible_connection=local ansible_python_interpreter=/usr/bin/python3\n",
  );
  const playbook = path.join(dir, "fc.yml");
  writeFileSync(
    playbook,
    `- hosts: doppio_hosts\n  gather_facts: false\n  roles: [{ role: ${ANSIBLE_DIR}/roles/firecracker }]\n`,
  );

  const run = (checksum: string, out: string) =>
    runPlaybook(path.relative(ANSIBLE_DIR, playbook), {
      inventory,
      vars: {
        doppio_firecracker_version: version,
        doppio_firecracker_url: `file://${tgz}`,
        doppio_firecracker_sha256: checksum,
        doppio_firecracker_dir: path.join(dir, out, "release"),
        doppio_firecracker_bin_dir: path.join(dir, out, "bin"),
      },
    });

  test("installs firecracker and jailer when the release matches its pinned sha256, then changes nothing", async () => {
    const first = await run(sha, "good");
    expect(first.code, describeRun(first)).toBe(0);
    expect(execFileSync(path.join(dir, "good/bin/jailer"), { encoding: "utf8" }).trim()).toBe(
      `jailer ${version}`,
    );
    expect(readFileSync(path.join(dir, "good/bin/firecracker"), "utf8")).toContain("firecracker");
    const second = await run(sha, "good");
    expect(second.stats.local).toMatchObject({ changed: 0, failures: 0 });
  }, 120_000);

  test("refuses a release whose sha256 differs, and installs nothing", async () => {
    const r = await run("0".repeat(64), "bad");
    expect(r.code).not.toBe(0);
    expect(r.failures.join("\n")).toMatch(/checksum/i);
    expect(spawnSync("test", ["-e", path.join(dir, "bad/bin/firecracker")]).status).toBe(1);
  }, 120_000);

  test("refuses to run without a pinned checksum", async () => {
    const r = await run("", "none");
    expect(r.code).not.toBe(0);
    expect(r.failures.join("\n")).toContain("doppio_firecracker_sha256 must be the sha256");
  }, 120_000);
});
