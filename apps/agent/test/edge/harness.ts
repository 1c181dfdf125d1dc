import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type AccessClaims, generateEd25519, hostKey, mint, sign } from "@doppio/access-token";
import { parseBoxHost } from "@doppio/contracts";
import Fastify, { type FastifyInstance } from "fastify";
import { freePort } from "../../../api/test/support/ports.ts";
import { EdgeAccess, loadOrCreateCookieKey } from "../../src/edge/access.ts";
import { BoxActivity } from "../../src/edge/activity.ts";
import { buildEdgeConfig } from "../../src/edge/caddy-config.ts";
import { EdgeConfigKeeper } from "../../src/edge/edge-config.ts";
import { edgePlugin } from "../../src/edge/plugin.ts";
import { type BoxRoute, MemoryRouteTable } from "../../src/edge/routes.ts";
import { type Db, openStore } from "../../src/store/db.ts";
import { EdgeAccessStore } from "../../src/store/edge-access.ts";
import { TestCaddy } from "../support/caddy.ts";
import { FakeGuest } from "./fixtures.ts";

export const DOMAIN = "doppio.test";
const OWNER = "user-1";

/** Guest ports a running test box answers on, each backed by a FakeGuest. */
const ROLES = { 8000: "site", 9000: "socketio", 8888: "code", 5173: "dev" } as const;

export interface Edge {
  caddy: TestCaddy;
  agent: FastifyInstance;
  access: EdgeAccess;
  /** The agent's SQLite store (a real file in the test's data dir). */
  ledger: EdgeAccessStore;
  agentDial: string;
  /** host:port of Caddy's box listener. */
  edge: string;
  routes: MemoryRouteTable;
  keeper: EdgeConfigKeeper;
  desiredConfig: Record<string, unknown>;
  guests: FakeGuest[];
  /** Test clock (ms); the agent reads it on every check. */
  clock: { now: number };
  /** What the edge recorded as each box's last use (requests it passed). */
  activity: BoxActivity;
  /** Slugs the edge asked to wake, in order. */
  wakes: string[];
  box(slug: string, patch?: Partial<BoxRoute>): void;
  /** A control-plane hand-off token for one box host; `sid` defaults to one signed-in session. */
  handoff(claims: Omit<AccessClaims, "exp" | "sid"> & { sid?: string }, ttlSeconds?: number): string;
  /** A hand-off token with exactly these claims (e.g. a chosen `jti`). */
  signHandoff(claims: AccessClaims): string;
  /** Stops the agent (API and store handle) and starts a new one on the same port and data dir. */
  restartAgent(): Promise<void>;
  close(): Promise<void>;
}

export const SESSION = "session-1";

export async function startEdge(): Promise<Edge> {
  const dataDir = await mkdtemp(join(tmpdir(), "doppio-edge-"));
  const cp = generateEd25519();
  const clock = { now: Date.now() };
  const routes = new MemoryRouteTable();
  const activity = new BoxActivity(() => clock.now);
  const wakes: string[] = [];

  const guests = await Promise.all(Object.values(ROLES).map((r) => FakeGuest.start(r)));
  const byPort = new Map(Object.keys(ROLES).map((p, i) => [Number(p), guests[i]!.address]));
  const upstream = (port: number) => byPort.get(port) ?? null;

  /** What one agent process holds: its store handle, its access state and its API. */
  const startAgentApi = async (port: number) => {
    const db: Db = openStore(dataDir);
    const ledger = new EdgeAccessStore(db);
    const access = new EdgeAccess({
      controlPlaneKey: cp.publicKey,
      cookieKey: await loadOrCreateCookieKey(dataDir),
      now: () => clock.now,
      ledger,
    });
    const agent = Fastify({ logger: false });
    await agent.register(edgePlugin, {
      domain: DOMAIN,
      routes,
      access,
      signInUrl: ({ slug, uri }) => `https://control.test/open/${slug}?next=${encodeURIComponent(uri)}`,
      activity,
      wake: (slug) => void wakes.push(slug),
    });
    await agent.listen({ host: "127.0.0.1", port });
    return { db, ledger, access, agent };
  };
  let running = await startAgentApi(0);
  const agentPort = (running.agent.server.address() as { port: number }).port;
  const agentDial = `127.0.0.1:${agentPort}`;

  const caddy = await TestCaddy.create();
  const edge = `127.0.0.1:${await freePort()}`;
  const desiredConfig = buildEdgeConfig({
    domain: DOMAIN,
    adminListen: caddy.adminListen,
    agentDial,
    tls: { mode: "http", listen: edge },
  });
  await caddy.start();
  const keeper = new EdgeConfigKeeper(caddy.admin, desiredConfig);

  const stopAgentApi = async () => {
    await running.agent.close();
    running.db.close();
  };

  return {
    caddy,
    get agent() {
      return running.agent;
    },
    get access() {
      return running.access;
    },
    get ledger() {
      return running.ledger;
    },
    agentDial,
    edge,
    routes,
    keeper,
    desiredConfig,
    guests,
    clock,
    activity,
    wakes,
    box(slug, patch = {}) {
      routes.set(slug, { state: "running", upstream, owner: OWNER, sitePublic: true, ...patch });
    },
    handoff(claims, ttlSeconds = 60) {
      return mint(cp.privateKey, { sid: SESSION, ...claims }, ttlSeconds, clock.now);
    },
    signHandoff(claims) {
      return sign(cp.privateKey, claims);
    },
    async restartAgent() {
      await stopAgentApi();
      running = await startAgentApi(agentPort);
    },
    async close() {
      // Each step runs even if an earlier one failed; what we started, we stop.
      const errors: unknown[] = [];
      for (const step of [
        () => caddy.dispose(),
        () => stopAgentApi(),
        ...guests.map((g) => () => g.close()),
        () => rm(dataDir, { recursive: true, force: true }),
      ]) {
        await step().catch((err: unknown) => errors.push(err));
      }
      if (errors.length) throw new AggregateError(errors, "edge harness teardown failed");
    },
  };
}

/** Sign in through the edge like a browser: hand-off link → 302 + cookie. Returns the Cookie header value. */
export function cookieFrom(setCookie: string | string[] | undefined): string {
  const first = Array.isArray(setCookie) ? setCookie[0] : setCookie;
  if (!first) throw new Error("no Set-Cookie in the sign-in answer");
  return first.split(";")[0]!;
}

/** The claims that open `host` (a box URL on DOMAIN) for its owner. */
export function forHost(host: string): Omit<AccessClaims, "exp"> {
  const box = parseBoxHost(host, DOMAIN);
  if (!box) throw new Error(`${host} is not a box host on ${DOMAIN}`);
  return { sub: box.slug, usr: OWNER, aud: box.kind === "site" ? "site" : "code", hst: hostKey(box) };
}
