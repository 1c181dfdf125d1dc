/**
 * `npm run scale-test -- --server NAME --boxes N`: N concurrent creates on one server through
 * the control plane's public API, then unique IPs, site and code answering through the host's
 * edge, VMM memory per box, stop/start/delete of all, and a search of the host for anything
 * left (disks, TAPs, IP allocations, routes, firewall entries, Caddy routes). Prints a
 * PASS/FAIL checklist and exits 1 if any check failed.
 *
 * Default: the `make up` stack on this machine (server `local`; its URL, admin and agent
 * paths from scripts/local/settings.ts and its secrets). Another server: --api URL,
 * --admin-email, --admin-password-file, and --ssh root@HOST to look at the host (the agent's
 * paths of provision/ansible/group_vars/all.yml unless --agent-data / --caddy-admin).
 */
import { readFileSync } from "node:fs";
import path from "node:path";
import { parseArgs } from "node:util";
import { Host } from "./scale/host.ts";
import { runScaleTest, summary } from "./scale/run.ts";

const { values } = parseArgs({
  options: {
    server: { type: "string" },
    boxes: { type: "string" },
    template: { type: "string", default: "minimal" },
    api: { type: "string" },
    "admin-email": { type: "string" },
    "admin-password-file": { type: "string" },
    ssh: { type: "string" },
    "ssh-identity": { type: "string" },
    "agent-data": { type: "string" },
    "caddy-admin": { type: "string" },
    edge: { type: "string" },
  },
});
const usage =
  "usage: npm run scale-test -- --server NAME --boxes N [--template minimal] [--api URL --admin-email E --admin-password-file F --ssh root@HOST [--ssh-identity KEY] [--edge HOST:PORT]]";
const boxes = Number(values.boxes);
if (!values.server || !Number.isInteger(boxes) || boxes < 1 || boxes > 100) {
  console.error(usage);
  process.exit(2);
}

const local = !values.ssh;
let apiUrl = values.api;
let adminEmail = values["admin-email"];
let adminPassword = values["admin-password-file"]
  ? readFileSync(values["admin-password-file"], "utf8").trim()
  : undefined;
let agentData = values["agent-data"];
let caddyAdmin = values["caddy-admin"];
let edge = values.edge;
if (local) {
  // The make-up stack: everything is on this machine, where scripts/local/ keeps it.
  const s = await import("./local/settings.ts");
  apiUrl ??= s.API_URL;
  adminEmail ??= s.ADMIN_EMAIL;
  adminPassword ??= JSON.parse(readFileSync(path.join(s.DATA, "secrets.json"), "utf8")).adminPassword;
  agentData ??= path.join(s.DATA, "agent");
  caddyAdmin ??= s.CADDY_ADMIN;
  edge ??= `127.0.0.1:${s.PORTS.edge}`;
}
if (!apiUrl || !adminEmail || !adminPassword) {
  console.error(`--api, --admin-email and --admin-password-file are needed with --ssh\n${usage}`);
  process.exit(2);
}

const host = new Host({
  target: values.ssh ?? "local",
  agentDataDir: agentData ?? "/var/lib/doppio-agent",
  caddyAdmin: caddyAdmin ?? "unix:/run/doppio/caddy-admin.sock",
  node: local
    ? { bin: process.execPath, cwd: path.resolve(import.meta.dirname, "../apps/agent") }
    : { bin: "/opt/doppio/runtime/bin/node", cwd: "/opt/doppio/apps/agent" },
  sshArgs: values["ssh-identity"] ? ["-i", values["ssh-identity"], "-o", "IdentitiesOnly=yes"] : [],
});

console.log(`scale test: ${boxes} × ${values.template} on ${values.server} via ${apiUrl}`);
try {
  const result = await runScaleTest({
    apiUrl,
    server: values.server,
    boxes,
    template: values.template!,
    admin: { email: adminEmail, password: adminPassword },
    host,
    ...(edge ? { edge } : {}),
  });
  for (const line of summary(result)) console.log(line);
  const failed = result.checks.filter((c) => !c.ok).length;
  console.log(
    failed
      ? `FAIL: ${failed} of ${result.checks.length} checks failed`
      : `PASS: all ${result.checks.length} checks`,
  );
  process.exit(failed ? 1 : 0);
} catch (err) {
  console.error(`scale test: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
  process.exit(1);
}
