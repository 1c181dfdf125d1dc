import type { FastifyInstance } from "fastify";
import type { Logger } from "pino";
import type { Clock } from "../clock.ts";
import type { AgentConfig } from "../config.ts";
import type { ControlPlane } from "../control-plane.ts";
import type { WarmPool } from "../pool/warm.ts";
import type { BoxStore } from "../store/boxes.ts";
import { GitCredentialCache } from "./credentials.ts";
import { buildMetadataService } from "./service.ts";
import { metadataListenHost } from "./tokens.ts";

export interface MetadataListener {
  app: FastifyInstance;
  /** Where the service listens (host side), once `listen()` succeeded; else null. */
  readonly url: string | null;
  /**
   * Binds the configured address. Failing to bind is logged, not thrown: boxes run without
   * it (their Git falls back to prompting), e.g. while the bridge lives in another netns.
   */
  listen(): Promise<string | null>;
  close(): Promise<void>;
}

export async function createMetadataListener(d: {
  config: AgentConfig;
  boxes: BoxStore;
  cp: ControlPlane;
  clock: Clock;
  log: Logger;
  /** The guests' gateway address (the bridge's own address in tap mode). */
  gateway: string;
  /** Where a guest's heartbeat (terminal or CPU use) is recorded. */
  activity?: { touch(slug: string): void };
  /** Parked clones of the warm pool wait here for their box's identity. */
  pool?: WarmPool | null;
}): Promise<MetadataListener> {
  const app = await buildMetadataService({
    boxes: d.boxes,
    credentials: new GitCredentialCache(d.cp, d.clock),
    checkSourceAddress: d.config.networkMode === "tap",
    ...(d.activity ? { activity: d.activity } : {}),
    pool: d.pool ?? null,
    log: d.log,
  });
  let url: string | null = null;
  return {
    app,
    get url() {
      return url;
    },
    async listen() {
      if (!d.config.metadata.enabled) return null;
      const host = metadataListenHost(d.config, d.gateway);
      const port = d.config.metadata.port;
      try {
        url = await app.listen({ host, port });
        d.log.info({ url }, "metadata service listening");
      } catch (err) {
        d.log.error(
          { err, host, port },
          "metadata service cannot listen; boxes on this host get no Git credentials",
        );
      }
      return url;
    },
    async close() {
      await app.close();
    },
  };
}
