import { readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import type { BoxJobPayload } from "@doppio/contracts";
import { pino } from "pino";
import type { ApiConfig } from "../../../api/src/config.ts";
import type { TestClient } from "../../../api/test/support/client.ts";
import {
  signedInAdmin,
  startControlPlane,
  type TestControlPlane,
} from "../../../api/test/support/control-plane.ts";
import { freePort } from "../../../api/test/support/ports.ts";
import { ReplicaProcess } from "../../../api/test/support/replica-process.ts";
import { systemClock } from "../../src/clock.ts";
import { type AgentConfig, parseConfig } from "../../src/config.ts";
import { type ControlPlane, HttpControlPlane } from "../../src/control-plane.ts";
import type { MemoryRouteTable } from "../../src/edge/routes.ts";
import type { ImageStore } from "../../src/images/store.ts";
import type { ImageBuilder } from "../../src/jobs/registry.ts";
import { type Agent, buildAgent } from "../../src/main.ts";
import type { Backend } from "../../src/vmm/executor.ts";
import { FakeExecutor, type FakeExecutorOptions } from "./fake-executor.ts";

export const API_TOKEN = "test-agent-api-token-0123456789";

/** apps/agent/package.json's version: what the agent must report (heartbeats, /health). */
export const AGENT_PACKAGE_VERSION = (
  JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string }
).version;

/** A create job's payload for `slug`: the minimal template, one vCPU, public site. */
export function boxPayload(slug: string): BoxJobPayload {
  return {
    slug,
    template: "minimal",
    templateVersion: "1",
    vcpu: 1,
    memoryMb: 256,
    diskGb: 1,
    env: {},
    owner: "user-1",
    sitePublic: true,
    publicWake: false,
    repo: null,
    githubUrl: "https://github.com",
    gitAuthor: null,
  };
}

/** A control plane with an admin signed in and one registered server. */
export interface CpEndpoint {
  url: string;
  admin: TestClient;
  serverName: string;
  agentToken: string;
  close(): Promise<void>;
}

/** The in-process kind, whose internals a test may reach. */
export interface TestCp extends CpEndpoint {
  env: TestControlPlane;
}

/** A real control plane (in-process, PGlite) with an admin and one registered server. */
export async function startCp(serverName = "host-1", config: Partial<ApiConfig> = {}): Promise<TestCp> {
  const env = await startControlPlane({ config });
  const admin = await env.admin();
  const agentToken = await registerHost(admin, serverName);
  return { env, url: env.url, admin, serverName, agentToken, close: () => env.close() };
}

/**
 * A real control plane (PGlite) as its own OS process, as `make up` runs it, with an admin
 * and one registered server: benches that time an agent beside it, so the control plane's
 * work (PGlite runs its queries on its process's one thread) never holds the agent's loop.
 */
export async function startCpProcess(
  serverName = "host-1",
  config: Partial<ApiConfig> = {},
): Promise<CpEndpoint> {
  const replica = await ReplicaProcess.prepare(null, await freePort(), config);
  try {
    await replica.start();
    const admin = await signedInAdmin(replica.url);
    const agentToken = await registerHost(admin, serverName);
    return { url: replica.url, admin, serverName, agentToken, close: () => replica.remove() };
  } catch (err) {
    await replica.remove();
    throw err;
  }
}

/** Registers server `name` (QEMU, room for plenty of boxes); returns its agent token. */
async function registerHost(admin: TestClient, name: string): Promise<string> {
  const res = await admin.post("/api/v1/servers", {
    name,
    domain: `${name}.example.test`,
    backend: "qemu",
    capacity: { vcpu: 64, memoryMb: 262144, diskGb: 2000 },
  });
  if (res.status !== 201) throw new Error(`register failed: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body.agentToken;
}

export function testConfig(raw: Record<string, unknown>): AgentConfig {
  return parseConfig({
    serverToken: "unset-token",
    domain: "host-1.example.test",
    apiToken: API_TOKEN,
    listen: "127.0.0.1:0",
    heartbeatIntervalMs: 500,
    reconcileIntervalMs: 600_000,
    claimWaitMs: 2_000,
    concurrency: 4,
    ...raw,
  });
}

export interface TestAgent {
  agent: Agent;
  fake: FakeExecutor;
  routes: MemoryRouteTable;
  dataDir: string;
  apiUrl: string | null;
  close(): Promise<void>;
}

/** The real agent core in this process (main.ts's buildAgent), with the recording fake executor. */
export async function startAgent(opts: {
  cpUrl: string;
  token: string;
  config?: Record<string, unknown>;
  fake?: FakeExecutorOptions;
  wrapCp?: (cp: ControlPlane) => ControlPlane;
  listen?: boolean;
  /** A real backend instead of the fake (built with the test's data dir). */
  backend?: (dataDir: string) => Backend;
  /** An image builder and the store it writes (built with the test's data dir), as main.ts wires them. */
  images?: (dataDir: string) => { builder: ImageBuilder; store: ImageStore };
}): Promise<TestAgent> {
  const dataDir = await mkdtemp(path.join(tmpdir(), "doppio-agent-"));
  const real = opts.backend?.(dataDir);
  const images = opts.images?.(dataDir);
  const config = testConfig({
    controlPlaneUrl: opts.cpUrl,
    serverToken: opts.token,
    dataDir,
    ...opts.config,
  });
  const fake = new FakeExecutor({ golden: { minimal: "ready" }, ...opts.fake });
  const http = new HttpControlPlane(config.controlPlaneUrl, config.serverToken, 5_000);
  const agent = await buildAgent(config, {
    executor: real?.executor ?? fake,
    network: real ? real.network : fake,
    cp: opts.wrapCp ? opts.wrapCp(http) : http,
    clock: systemClock,
    log: pino({ level: process.env.DOPPIO_TEST_LOG ?? "silent" }),
    images: images ?? null,
  });
  const apiUrl = await agent.start({ listen: opts.listen ?? false });
  return {
    agent,
    fake,
    routes: agent.routes,
    dataDir,
    apiUrl,
    async close() {
      await agent.runner.idle();
      await agent.stop();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

export async function waitFor<T>(
  what: string,
  fn: () => Promise<T | null | undefined | false> | T | null | undefined | false,
  timeoutMs = 20_000,
  everyMs = 100,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline)
      throw new Error(`timed out waiting for ${what}${last ? `: ${String(last)}` : ""}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** Waits until the control plane has had a heartbeat from the server (placement needs it). */
export async function waitForHeartbeat(cp: CpEndpoint): Promise<void> {
  await waitFor("a heartbeat", async () => {
    const s = await cp.admin.get(`/api/v1/servers/${cp.serverName}`);
    return s.body.lastHeartbeatAt !== null;
  });
}

export async function waitForBox(cp: TestCp, slug: string, status: string, timeoutMs = 20_000) {
  return waitFor(
    `box ${slug} to be ${status}`,
    async () => {
      const r = await cp.admin.get(`/api/v1/boxes/${slug}`);
      return r.body?.status === status ? r.body : null;
    },
    timeoutMs,
  );
}

/** A control plane and an agent core (the fake VMM) that has heartbeated, with one running minimal box. */
export async function startWithRunningBox(name: string): Promise<{ cp: TestCp; a: TestAgent }> {
  const cp = await startCp();
  const a = await startAgent({ cpUrl: cp.url, token: cp.agentToken });
  await waitForHeartbeat(cp);
  const res = await cp.admin.post("/api/v1/boxes", { template: "minimal", name });
  if (res.status !== 202) throw new Error(`create ${name}: ${res.status} ${JSON.stringify(res.body)}`);
  await waitForBox(cp, name, "running");
  return { cp, a };
}

export async function boxJobs(cp: Pick<CpEndpoint, "admin">, slug: string): Promise<any[]> {
  const r = await cp.admin.get(`/api/v1/boxes/${slug}/jobs`);
  if (r.status !== 200) throw new Error(`jobs of ${slug}: ${r.status}`);
  return r.body.jobs;
}
