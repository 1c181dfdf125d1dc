import { generateKeyPairSync } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect } from "node:tls";
import Fastify, { type FastifyInstance } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort } from "../../../api/test/support/ports.ts";
import { EdgeAccess } from "../../src/edge/access.ts";
import { buildEdgeConfig } from "../../src/edge/caddy-config.ts";
import { EdgeConfigKeeper } from "../../src/edge/edge-config.ts";
import { edgePlugin } from "../../src/edge/plugin.ts";
import { MemoryRouteTable } from "../../src/edge/routes.ts";
import { type Db, openStore } from "../../src/store/db.ts";
import { EdgeAccessStore } from "../../src/store/edge-access.ts";
import { findCaddy, TestCaddy } from "../support/caddy.ts";

const hasCaddy = findCaddy() !== null;
if (!hasCaddy) console.warn("SKIPPING on-demand TLS test: `caddy` (2.6.2) is not on PATH");

const DOMAIN = "doppio.test";

/**
 * TLS handshake with SNI. It cannot succeed (the ACME CA is a closed loopback port) and
 * Caddy holds it while it retries, so stop as soon as `seen()` holds or the handshake ends.
 */
function handshake(port: number, servername: string, seen: () => boolean): Promise<void> {
  return new Promise((resolve) => {
    const s = connect({ host: "127.0.0.1", port, servername, rejectUnauthorized: false });
    const poll = setInterval(() => seen() && done(), 50);
    const limit = setTimeout(() => done(), 15_000);
    function done() {
      clearInterval(poll);
      clearTimeout(limit);
      s.destroy();
      resolve();
    }
    s.once("secureConnect", done);
    s.once("error", done);
  });
}

describe.skipIf(!hasCaddy)("on-demand TLS (no DNS token) against a real Caddy 2.6.2", () => {
  let caddy: TestCaddy;
  let agent: FastifyInstance;
  let httpsPort: number;
  let dataDir: string;
  let db: Db;
  const asked: { domain: string; status: number }[] = [];

  beforeAll(async () => {
    const routes = new MemoryRouteTable();
    routes.set("alpha", { state: "running", upstream: () => null, owner: "u", sitePublic: true });
    const key = generateKeyPairSync("ed25519");
    dataDir = await mkdtemp(join(tmpdir(), "doppio-edge-tls-"));
    db = openStore(dataDir);
    agent = Fastify({ logger: false });
    agent.addHook("onResponse", async (req, reply) => {
      if (req.url.startsWith("/tls/ask"))
        asked.push({ domain: String((req.query as { domain?: string }).domain), status: reply.statusCode });
    });
    await agent.register(edgePlugin, {
      domain: DOMAIN,
      routes,
      access: new EdgeAccess({
        controlPlaneKey: key.publicKey,
        cookieKey: key.publicKey,
        now: Date.now,
        ledger: new EdgeAccessStore(db),
      }),
    });
    await agent.listen({ host: "127.0.0.1", port: 0 });
    caddy = await TestCaddy.create();
    httpsPort = await freePort();
    const config = buildEdgeConfig({
      domain: DOMAIN,
      adminListen: caddy.adminListen,
      agentDial: `127.0.0.1:${(agent.server.address() as { port: number }).port}`,
      // Nothing listens there: certificate orders fail on loopback instead of reaching the internet.
      tls: {
        mode: "https",
        httpPort: await freePort(),
        httpsPort,
        acmeCa: `http://127.0.0.1:${await freePort()}/directory`,
      },
    });
    await caddy.start(config);
    // Caddy started from the very config the agent wants: the keeper must not reload it.
    expect(await new EdgeConfigKeeper(caddy.admin, config).ensureConfig()).toBe("unchanged");
  });

  afterAll(async () => {
    await caddy?.dispose();
    await agent?.close();
    db?.close();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  it("asks the agent at the first handshake and orders a cert only for existing boxes", async () => {
    await handshake(httpsPort, `alpha.site.${DOMAIN}`, () => caddy.log.includes('"obtaining certificate"'));
    await handshake(httpsPort, `nobody.site.${DOMAIN}`, () => asked.length === 2);
    expect(asked).toEqual([
      { domain: `alpha.site.${DOMAIN}`, status: 200 },
      { domain: `nobody.site.${DOMAIN}`, status: 404 },
    ]);
    expect(caddy.log).toContain(`"obtaining certificate","identifier":"alpha.site.${DOMAIN}"`);
    expect(caddy.log).not.toContain(`"identifier":"nobody.site.${DOMAIN}"`);
    // The wildcard host matchers must not trigger up-front (impossible) wildcard orders.
    expect(caddy.log).not.toContain("enabling automatic TLS certificate management");
  });
});
