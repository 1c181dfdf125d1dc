import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { stringify as toYaml } from "yaml";
import { HttpCaddyAdmin, parseCaddyAdminAddress } from "../../apps/agent/src/edge/caddy-admin.ts";
import { alive, readPids, removeFile, startService, stopPids, waitFor, writePids } from "./processes.ts";
import {
  ADMIN_EMAIL,
  API_URL,
  CADDY_ADMIN,
  DATA,
  DISK_GB,
  DOMAIN,
  PIDS,
  PORTS,
  ROOT,
  SERVER_NAME,
} from "./settings.ts";

const TSX = path.join(ROOT, "node_modules/.bin/tsx");

export interface Secrets {
  adminPassword: string;
  agentToken?: string;
  agentApiToken: string;
}

export function loadSecrets(): { secrets: Secrets; fresh: boolean } {
  const file = path.join(DATA, "secrets.json");
  if (existsSync(file)) return { secrets: JSON.parse(readFileSync(file, "utf8")), fresh: false };
  const secrets: Secrets = {
    adminPassword: randomBytes(12).toString("base64url"),
    agentApiToken: randomBytes(24).toString("base64url"),
  };
  writeFileSync(file, JSON.stringify(secrets), { mode: 0o600 });
  return { secrets, fresh: true };
}

function saveSecrets(secrets: Secrets): void {
  writeFileSync(path.join(DATA, "secrets.json"), JSON.stringify(secrets), { mode: 0o600 });
}

async function api(method: string, route: string, body?: unknown, cookie?: string) {
  // Cookie-authenticated changes must be JSON from the control plane's own origin (CSRF check).
  const change = method !== "GET";
  const res = await fetch(`${API_URL}${route}`, {
    method,
    headers: {
      ...(change ? { "content-type": "application/json", origin: new URL(API_URL).origin } : {}),
      ...(cookie ? { cookie } : {}),
    },
    body: change ? JSON.stringify(body ?? {}) : undefined,
  });
  const text = await res.text();
  return {
    status: res.status,
    body: text ? JSON.parse(text) : null,
    cookie: res.headers.getSetCookie()[0]?.split(";")[0],
  };
}

/**
 * The control plane creates the admin account from its configuration (ADMIN_EMAIL and this
 * file) before it listens, so nobody can sign up first and take the install.
 */
function adminPasswordFile(secrets: Secrets): string {
  const file = path.join(DATA, "admin-password");
  writeFileSync(file, secrets.adminPassword, { mode: 0o600 });
  return file;
}

/** A session for the admin account. */
export async function adminSession(secrets: Secrets): Promise<string> {
  const res = await api("POST", "/api/v1/auth/login", {
    email: ADMIN_EMAIL,
    password: secrets.adminPassword,
  });
  if (!res.cookie) throw new Error(`cannot sign in as ${ADMIN_EMAIL}: ${JSON.stringify(res.body)}`);
  return res.cookie;
}

/**
 * Whether the control plane accepts this agent token. An agent route with a job that does
 * not exist answers 404 to a known token and 401 to any other: authentication runs before
 * anything else (ARCHITECTURE.md, Control plane), so nothing is claimed or recorded.
 */
async function agentTokenWorks(token: string): Promise<boolean> {
  const res = await fetch(`${API_URL}/agent/v1/jobs/00000000-0000-4000-8000-000000000000/events`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify({ events: [] }),
  });
  return res.status !== 401;
}

/**
 * Makes sure the control plane knows server `local` and that our agent token is its token:
 * registered when the control plane does not know it (a new or reset database), a new token
 * when ours is missing or no longer accepted. Returns how it went, for the log.
 */
export async function ensureServer(
  secrets: Secrets,
  cookie: string,
): Promise<"kept" | "registered" | "new token"> {
  const known = await api("GET", `/api/v1/servers/${SERVER_NAME}`, undefined, cookie);
  if (known.status !== 404 && known.status !== 200)
    throw new Error(`cannot read server ${SERVER_NAME}: ${known.status} ${JSON.stringify(known.body)}`);
  if (known.status === 200 && secrets.agentToken && (await agentTokenWorks(secrets.agentToken)))
    return "kept";
  const capacity = {
    // Dev boxes idle most of the time: vCPUs are overcommitted 4:1, memory is not.
    vcpu: os.cpus().length * 4,
    memoryMb: Math.floor((os.totalmem() / 1024 / 1024) * 0.75),
    diskGb: DISK_GB,
  };
  let how: "registered" | "new token" = "registered";
  let res =
    known.status === 404
      ? await api(
          "POST",
          "/api/v1/servers",
          {
            name: SERVER_NAME,
            domain: DOMAIN,
            backend: "qemu",
            capacity,
            publicScheme: "http",
            publicPort: PORTS.edge,
          },
          cookie,
        )
      : { status: 409, body: null };
  if (res.status === 409) {
    how = "new token";
    res = await api("POST", `/api/v1/servers/${SERVER_NAME}/token`, undefined, cookie);
  }
  if (!res.body?.agentToken) throw new Error(`cannot register server: ${JSON.stringify(res.body)}`);
  secrets.agentToken = res.body.agentToken as string;
  saveSecrets(secrets);
  return how;
}

/** Waits until the agent's first heartbeat since `since` has arrived and the server is active. */
export async function waitForHeartbeat(cookie: string, since: number, timeoutMs = 60_000): Promise<void> {
  let last: unknown = null;
  try {
    await waitFor(
      "the agent's first heartbeat",
      async () => {
        const res = await api("GET", `/api/v1/servers/${SERVER_NAME}`, undefined, cookie);
        last = res.body;
        const beat = res.body?.lastHeartbeatAt ? Date.parse(res.body.lastHeartbeatAt) : 0;
        return res.status === 200 && beat >= since && res.body.status === "active";
      },
      timeoutMs,
    );
  } catch {
    throw new Error(
      `the agent has not reached the control plane as an active server (${JSON.stringify(last)}); see ${DATA}/agent.log`,
    );
  }
}

/** What a test or demo adds to the local stack. */
export interface LocalStackOptions {
  /**
   * Host loopback ports the boxes may reach at their gateway (the agent's
   * `userModeHostPorts`): a local GitHub stand-in's, so boxes clone from it and push to it.
   */
  guestHostPorts?: number[];
}

function agentConfig(secrets: Secrets, opts: LocalStackOptions): string {
  const file = path.join(DATA, "agent.yaml");
  const config = {
    controlPlaneUrl: API_URL,
    serverToken: secrets.agentToken,
    dataDir: path.join(DATA, "agent"),
    domain: DOMAIN,
    publicScheme: "http",
    publicPort: PORTS.edge,
    backend: "qemu",
    // minimal is built below; code and frappe are built on request (dashboard: Servers,
    // or POST /api/v1/servers/local/images), which also builds their golden snapshots.
    templates: [{ name: "minimal" }, { name: "code" }, { name: "frappe" }],
    // User-mode networking: the VMs reach nothing on the host's networks and the edge
    // reaches them through loopback port forwards (no bridge, no private addresses).
    networkMode: "user",
    userModeHostPorts: opts.guestHostPorts ?? [],
    caddyAdmin: CADDY_ADMIN,
    listen: `127.0.0.1:${PORTS.agent}`,
    metadata: { port: PORTS.metadata },
    apiToken: secrets.agentApiToken,
    reconcileIntervalMs: 10_000,
    heartbeatIntervalMs: 5_000,
    edge: {
      tls: { mode: "http", listen: `127.0.0.1:${PORTS.edge}` },
      signInUrl: `${API_URL}/api/v1/access/open`,
    },
  };
  writeFileSync(file, toYaml(config), { mode: 0o600 });
  return file;
}

function caddyBootConfig(): string {
  const file = path.join(DATA, "caddy.json");
  writeFileSync(file, JSON.stringify({ admin: { listen: parseCaddyAdminAddress(CADDY_ADMIN)!.listen } }));
  return file;
}

/**
 * The template's image in the agent's image store. A built image is never rebuilt in place:
 * the golden snapshot and every box's disk are copy-on-write layers on top of it.
 */
function buildImage(template: string, version: string): void {
  const out = path.join(DATA, "agent/images", template, version);
  if (existsSync(path.join(out, "rootfs.qcow2"))) {
    console.log(
      `doppiobox: using the built ${template} image (remove ${DATA} to rebuild it from its recipe)`,
    );
    return;
  }
  console.log(`doppiobox: building the ${template} image…`);
  execFileSync(path.join(ROOT, "scripts/build-image.sh"), [template, out], { cwd: ROOT, stdio: "inherit" });
}

/** Asks the agent for the template's golden snapshot unless it has a ready one, and waits. */
async function ensureGolden(secrets: Secrets, template: string): Promise<void> {
  const agentApi = (route: string, init: RequestInit = {}) =>
    fetch(`http://127.0.0.1:${PORTS.agent}${route}`, {
      ...init,
      headers: { authorization: `Bearer ${secrets.agentApiToken}`, "content-type": "application/json" },
    }).then((r) => r.json() as Promise<{ templates?: Record<string, { status: string }> }>);
  const status = async () => (await agentApi("/golden-snapshot/status")).templates?.[template]?.status;
  if ((await status()) === "ready") return;
  console.log(`doppiobox: building the ${template} golden snapshot (once; later runs reuse it)…`);
  await agentApi("/golden-snapshot/build", { method: "POST", body: JSON.stringify({ template }) });
  const deadline = Date.now() + 10 * 60_000;
  for (let s = await status(); s !== "ready"; s = await status()) {
    if (s === "failed") throw new Error(`the ${template} golden build failed; see ${DATA}/agent.log`);
    if (Date.now() > deadline) throw new Error(`the ${template} golden build did not finish in 10 minutes`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

/** Builds the dashboard unless its build is newer than every source it comes from. */
function buildDashboard(): string {
  const dist = path.join(ROOT, "apps/dashboard/dist");
  const built = existsSync(path.join(dist, "index.html"))
    ? statSync(path.join(dist, "index.html")).mtimeMs
    : 0;
  const newest = (dir: string): number =>
    readdirSync(dir, { withFileTypes: true }).reduce((max, e) => {
      const p = path.join(dir, e.name);
      return Math.max(max, e.isDirectory() ? newest(p) : statSync(p).mtimeMs);
    }, 0);
  const sources = ["apps/dashboard/src", "apps/dashboard/index.html", "packages/contracts/src"].map((p) =>
    path.join(ROOT, p),
  );
  if (sources.every((p) => (statSync(p).isDirectory() ? newest(p) : statSync(p).mtimeMs) < built))
    return dist;
  console.log("doppiobox: building the dashboard…");
  execFileSync("npm", ["run", "-s", "build", "-w", "@doppio/dashboard"], { cwd: ROOT, stdio: "inherit" });
  return dist;
}

export async function startLocalStack(
  opts: LocalStackOptions = {},
): Promise<{ freshAdmin: boolean; password: string }> {
  mkdirSync(DATA, { recursive: true });
  const running = readPids(PIDS);
  if (Object.values(running.pids).some(alive)) {
    throw new Error("doppiobox is already running here (make down stops it)");
  }
  const { secrets, fresh } = loadSecrets();
  const pids: Record<string, number> = {};
  const remember = (name: string, pid: number | undefined) => {
    if (pid) pids[name] = pid;
    writePids(PIDS, { pids });
  };

  const dashboardDir = buildDashboard();
  const apiProc = startService("control plane", TSX, [path.join(ROOT, "apps/api/src/main.ts")], {
    env: {
      DOPPIO_API_DATA_DIR: path.join(DATA, "api"),
      DOPPIO_API_PORT: String(PORTS.api),
      DOPPIO_PUBLIC_URL: API_URL,
      DOPPIO_DASHBOARD_DIR: dashboardDir,
      DOPPIO_ADMIN_EMAIL: ADMIN_EMAIL,
      DOPPIO_ADMIN_PASSWORD_FILE: adminPasswordFile(secrets),
    },
    log: path.join(DATA, "api.log"),
  });
  remember("api", apiProc.pid);
  // Its start (tsx, then PGlite's migrations) took 36 s on a 2-core machine at load 22.
  await waitFor("the control plane", async () => (await fetch(`${API_URL}/healthz`)).ok, 180_000);

  const cookie = await adminSession(secrets);
  const server = await ensureServer(secrets, cookie);
  if (server !== "kept") console.log(`doppiobox: server ${SERVER_NAME} ${server} in the control plane`);

  const caddy = startService("caddy", "caddy", ["run", "--config", caddyBootConfig()], {
    env: {
      HOME: DATA,
      XDG_DATA_HOME: path.join(DATA, "caddy-data"),
      XDG_CONFIG_HOME: path.join(DATA, "caddy-config"),
    },
    log: path.join(DATA, "caddy.log"),
  });
  remember("caddy", caddy.pid);
  const caddyAdmin = new HttpCaddyAdmin({ address: CADDY_ADMIN });
  await waitFor("caddy", () => caddyAdmin.healthy(), 20_000);

  buildImage("minimal", "1");
  // Heartbeats carry whole seconds at worst: compare with the start rounded down.
  const agentStarted = Math.floor(Date.now() / 1000) * 1000;
  const agent = startService(
    "agent",
    TSX,
    [path.join(ROOT, "apps/agent/src/main.ts"), "--config", agentConfig(secrets, opts)],
    {
      log: path.join(DATA, "agent.log"),
    },
  );
  remember("agent", agent.pid);
  await waitFor("the agent", async () => (await fetch(`http://127.0.0.1:${PORTS.agent}/health`)).ok, 180_000);
  await ensureGolden(secrets, "minimal");
  await waitForHeartbeat(cookie, agentStarted);
  return { freshAdmin: fresh, password: secrets.adminPassword };
}

/** Stops the services by PID, then any VM the local agent left running, then forgets them. */
export async function stopLocalStack(): Promise<void> {
  const { pids } = readPids(PIDS);
  const ours = (name: string, cmd: string) =>
    name === "caddy" ? cmd.includes("caddy") : cmd.includes("tsx") || cmd.includes("node");
  await stopPids({ agent: pids.agent ?? 0, caddy: pids.caddy ?? 0 }, ours);
  await stopLocalVms();
  await stopPids({ api: pids.api ?? 0 }, ours);
  await removeFile(PIDS);
}

/** QEMU processes of the local agent's boxes, found by their pid files under its data dir. */
async function stopLocalVms(): Promise<void> {
  const { readdir } = await import("node:fs/promises");
  const root = path.join(DATA, "agent");
  const vmPids: Record<string, number> = {};
  const walk = async (dir: string, depth: number): Promise<void> => {
    if (depth > 4) return;
    for (const entry of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
      const p = path.join(dir, entry.name);
      if (entry.isDirectory()) await walk(p, depth + 1);
      else if (entry.name.endsWith(".pid") || entry.name === "pid") {
        const pid = Number(readFileSync(p, "utf8").trim());
        if (pid > 0) vmPids[p] = pid;
      }
    }
  };
  await walk(root, 0);
  await stopPids(vmPids, (_name, cmd) => cmd.includes("qemu-system"), 3000);
}
