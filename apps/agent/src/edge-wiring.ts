import type { KeyObject } from "node:crypto";
import { readFileSync } from "node:fs";
import type { HeartbeatResponse } from "@doppio/contracts";
import type { FastifyPluginAsync } from "fastify";
import type { Logger } from "pino";
import type { AgentDeps } from "./agent.ts";
import type { AgentConfig } from "./config.ts";
import { parseCaddyAdminAddress } from "./edge/caddy-admin.ts";
import type { RouteTable } from "./edge/routes.ts";

export interface EdgeWiring {
  deps: NonNullable<AgentDeps["edge"]>;
  /** Takes the control plane's access key from each heartbeat answer. */
  onHeartbeat: (res: HeartbeatResponse) => void;
  /** Re-checks Caddy's config on its own interval (faster than reconcile after a Caddy restart). */
  watch(): void;
  /** Stops the watch and closes the edge's store handle: call after the API has closed. */
  stop(): void;
}

/**
 * Builds the edge (edge helper's modules) for a host whose config has `edge`: the Fastify
 * plugin Caddy calls on loopback, and the keeper of Caddy's one static config. Imported
 * lazily by main.ts so a host without an edge never loads it.
 */
export async function buildEdge(
  config: AgentConfig,
  routes: RouteTable,
  log: Logger,
): Promise<EdgeWiring | null> {
  if (!config.edge || !config.caddyAdmin) return null;
  const edgeCfg = config.edge;
  const edge = await import("./edge/index.ts");
  const { generateEd25519, publicKeyFromPem } = await import("@doppio/access-token");
  const { openStore } = await import("./store/db.ts");
  const { EdgeAccessStore } = await import("./store/edge-access.ts");
  // Its own handle on the agent's SQLite file (WAL): the edge is built before the agent core.
  const db = openStore(config.dataDir);
  // Until a key arrives (file or first heartbeat), a throwaway key makes every hand-off
  // fail verification: private URLs stay closed rather than open.
  let key: KeyObject = edgeCfg.controlPlaneKeyFile
    ? publicKeyFromPem(readFileSync(edgeCfg.controlPlaneKeyFile, "utf8"))
    : generateEd25519().publicKey;
  let keyPem: string | null = null;
  const access = new edge.EdgeAccess({
    get controlPlaneKey() {
      return key;
    },
    cookieKey: await edge.loadOrCreateCookieKey(config.dataDir),
    now: () => Date.now(),
    ledger: new EdgeAccessStore(db),
  });
  const desired = edge.buildEdgeConfig({
    domain: config.domain,
    adminListen: parseCaddyAdminAddress(config.caddyAdmin)!.listen,
    agentDial: config.listen,
    tls: edgeCfg.tls,
    storageDir: `${config.dataDir}/caddy`,
  });
  const keeper = new edge.EdgeConfigKeeper(
    new edge.HttpCaddyAdmin({ address: config.caddyAdmin }),
    desired,
    log,
  );
  const signIn = edgeCfg.signInUrl;
  return {
    deps: {
      plugin: edge.edgePlugin as unknown as FastifyPluginAsync<never>,
      options: {
        domain: config.domain,
        routes,
        access,
        ...(signIn
          ? {
              signInUrl: ({ host, uri }: { slug: string; host: string; uri: string }) => {
                const u = new URL(signIn);
                u.searchParams.set("host", host);
                u.searchParams.set("next", uri);
                return u.toString();
              },
            }
          : {}),
      },
      keeper,
    },
    onHeartbeat(res) {
      try {
        access.endSessions(res.endedSessions);
      } catch (err) {
        log.error({ err }, "could not record the control plane's signed-out sessions");
      }
      if (!res.accessPublicKey || res.accessPublicKey === keyPem) return;
      try {
        key = publicKeyFromPem(res.accessPublicKey);
        keyPem = res.accessPublicKey;
        log.info("control plane access key loaded from heartbeat");
      } catch (err) {
        log.error({ err }, "heartbeat carried an access key that is not a PEM public key");
      }
    },
    watch: () => keeper.watch(edgeCfg.checkIntervalMs),
    stop() {
      keeper.stop();
      db.close();
    },
  };
}
