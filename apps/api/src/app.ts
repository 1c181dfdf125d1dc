import { existsSync } from "node:fs";
import { ROUTE_TAGS, SECURITY_SCHEMES } from "@doppio/contracts";
import cookie from "@fastify/cookie";
import rateLimit from "@fastify/rate-limit";
import fastifyStatic from "@fastify/static";
import swagger from "@fastify/swagger";
import Fastify, {
  type FastifyBaseLogger,
  type FastifyInstance,
  type RawReplyDefaultExpression,
  type RawRequestDefaultExpression,
  type RawServerDefault,
} from "fastify";
import { serializerCompiler, validatorCompiler, type ZodTypeProvider } from "fastify-type-provider-zod";
import type { Logger } from "pino";
import { recoverInterruptedPlays } from "./ansible/recovery.ts";
import { PlayRunner } from "./ansible/runner.ts";
import { ensureSshKey } from "./ansible/ssh-key.ts";
import { dummyHash, RECOMMENDED_SCRYPT_N, scryptParams } from "./auth/password.ts";
import type { WalletNotifier } from "./billing/funds.ts";
import { startBilling } from "./billing/loop.ts";
import { walletNotifierFor } from "./billing/mail.ts";
import { seedPrices } from "./billing/prices.ts";
import { stripeClient } from "./billing/stripe.ts";
import type { ApiConfig } from "./config.ts";
import { type Clock, type Ctx, systemClock } from "./context.ts";
import type { Database } from "./db/client.ts";
import { githubRoutes, githubWebhookRoutes } from "./github/routes.ts";
import { startGitHub } from "./github/service.ts";
import { requireMetricsToken } from "./http/auth.ts";
import { clientErrorHandler, frameworkErrors, installErrorHandling } from "./http/errors.ts";
import { refuseUnstorableText } from "./http/text.ts";
import { mailerFor } from "./mail.ts";
import { createMetrics } from "./metrics.ts";
import { Bus } from "./realtime/bus.ts";
import { PgBus } from "./realtime/pg-bus.ts";
import { busReader } from "./realtime/reload.ts";
import { StreamSlots } from "./realtime/stream-slots.ts";
import { accessRoutes } from "./routes/access.ts";
import { agentRoutes } from "./routes/agent.ts";
import { agentGitRoutes } from "./routes/agent-git.ts";
import { authRoutes } from "./routes/auth.ts";
import { billingRoutes } from "./routes/billing.ts";
import { boxRoutes } from "./routes/boxes.ts";
import { openApiTransform } from "./routes/contract.ts";
import { eventRoutes } from "./routes/events.ts";
import { idleRoutes } from "./routes/idle.ts";
import { agentLogRoutes, logRoutes } from "./routes/logs.ts";
import { playRoutes } from "./routes/plays.ts";
import { serverRoutes } from "./routes/servers.ts";
import { loadAccessKeys } from "./services/access.ts";
import { bootstrapAdmin } from "./services/admin.ts";
import { AgentInFlight } from "./services/agent-in-flight.ts";
import { ClaimSeats } from "./services/claim-seats.ts";
import { type GitCredentialSource, noGitCredentials } from "./services/git-credentials.ts";
import { idleTick, livenessTick, reapTick } from "./services/periodic.ts";
import { databaseRateStore, RateWindow } from "./services/rate-limits.ts";
import { seedTemplates } from "./services/templates.ts";

export interface AppDeps {
  config: ApiConfig;
  database: Database;
  logger: Logger;
  clock?: Clock;
  /** Where box Git credentials come from; none are issued when unset. */
  gitCredentials?: GitCredentialSource;
  /** How wallet warnings reach their owners; the log when unset. */
  walletNotifier?: WalletNotifier;
}

/** The Fastify instance with the zod type provider, as the routes see it. */
type ControlPlaneApp = FastifyInstance<
  RawServerDefault,
  RawRequestDefaultExpression,
  RawReplyDefaultExpression,
  FastifyBaseLogger,
  ZodTypeProvider
>;

export interface ControlPlane {
  app: ControlPlaneApp;
  ctx: Ctx;
  /**
   * Runs the periodic work (lease reaper, host liveness) on the reaper interval until
   * `close()`, each on one replica at a time (services/periodic.ts).
   */
  startReaper(): void;
  /** Settles usage on its interval and at box state changes until `close()`. */
  startBilling(): void;
  close(): Promise<void>;
}

export async function buildControlPlane(deps: AppDeps): Promise<ControlPlane> {
  const { config } = deps;
  const app = Fastify({
    loggerInstance: deps.logger as FastifyBaseLogger,
    bodyLimit: config.bodyLimitBytes,
    // req.ip (what login limits key on) reads X-Forwarded-For only from these proxies.
    trustProxy: config.trustProxy.length > 0 ? config.trustProxy : false,
    // Long junk in a path parameter is a box that does not exist (404), not a 414.
    routerOptions: { maxParamLength: 1024 },
    // Long-polls outlive the default timeouts; keep-alive must outlast the longest claim.
    keepAliveTimeout: config.maxClaimWaitMs + 10_000,
    requestTimeout: config.maxClaimWaitMs + 30_000,
    clientErrorHandler,
    frameworkErrors,
  }).withTypeProvider<ZodTypeProvider>();
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);

  const mailer = mailerFor(config);
  const ctx: Ctx = {
    db: deps.database.db,
    claimDb: deps.database.claimDb,
    tasks: deps.database.tasks,
    config,
    clock: deps.clock ?? systemClock,
    // PGlite is one process; on PostgreSQL every replica hears every other (realtime/pg-bus.ts).
    bus:
      deps.database.kind === "postgres" && config.databaseUrl
        ? new PgBus({
            connectionString: config.databaseUrl,
            replica: deps.database.applicationName,
            db: deps.database.db,
            reader: busReader(deps.database.db),
            log: deps.logger,
            reconnectMs: config.busReconnectMs,
          })
        : new Bus(),
    log: deps.logger,
    metrics: createMetrics(),
    access: await loadAccessKeys(deps.database.db),
    gitCredentials: deps.gitCredentials ?? noGitCredentials,
    streamSlots: new StreamSlots(config.streamsPerUser),
    claimSeats: new ClaimSeats(),
    agentInFlight: new AgentInFlight(),
    boxCreates: new RateWindow(deps.database.db, "box-create", config.boxCreatesPerMinute, 60_000),
    mailer,
    walletNotifier: deps.walletNotifier ?? walletNotifierFor(mailer, config, deps.logger),
    verificationResends: new RateWindow(
      deps.database.db,
      "verify-resend",
      config.verificationResendsPerHour,
      3_600_000,
    ),
    stripe: stripeClient(config),
  };

  if (config.github) {
    ctx.github = await startGitHub(ctx, config.github);
    if (!deps.gitCredentials) ctx.gitCredentials = ctx.github.credentials;
  }

  await ctx.bus.start();
  installErrorHandling(app);
  refuseUnstorableText(app);
  await app.register(cookie);
  // Counted in the database, so a limit holds whichever replica a request reaches.
  await app.register(rateLimit, { global: false, store: databaseRateStore(deps.database.db) });
  await app.register(swagger, {
    openapi: {
      openapi: "3.0.3",
      info: {
        title: "doppiobox control plane",
        version: "1",
        description:
          "Boxes (microVMs with a Frappe site and VS Code) for your team, the hosts that run them, and the protocol their agents speak. Every refusal is `{error: {code, message, details?}}` with a code from a closed set. A typed TypeScript client is packages/sdk.",
      },
      // Where this control plane says it is (the origin its CSRF check expects).
      servers: [{ url: new URL(config.publicUrl).origin, description: "this control plane" }],
      tags: Object.entries(ROUTE_TAGS).map(([name, description]) => ({ name, description })),
      components: { securitySchemes: SECURITY_SCHEMES },
    },
    transform: openApiTransform,
  });

  app.addHook("onResponse", async (req, reply) => {
    ctx.metrics.httpDuration.observe(
      { method: req.method, route: req.routeOptions.url ?? "unmatched", status: String(reply.statusCode) },
      reply.elapsedTime / 1000,
    );
  });

  app.get("/healthz", { schema: { hide: true } }, async () => {
    await ctx.db.execute("select 1");
    return { ok: true, database: deps.database.kind };
  });
  app.get(
    "/metrics",
    { onRequest: requireMetricsToken(ctx), schema: { hide: true } },
    async (_req, reply) => {
      reply.header("content-type", ctx.metrics.registry.contentType);
      return ctx.metrics.registry.metrics();
    },
  );
  app.get("/openapi.json", { schema: { hide: true } }, async () => app.swagger());

  // Each route carries its full path from the contract (packages/contracts/src/routes.ts).
  await app.register(authRoutes(ctx));
  await app.register(boxRoutes(ctx));
  await app.register(serverRoutes(ctx));
  await app.register(eventRoutes(ctx));
  await app.register(accessRoutes(ctx));
  await app.register(logRoutes(ctx));
  await app.register(agentRoutes(ctx));
  await app.register(agentGitRoutes(ctx));
  await app.register(agentLogRoutes(ctx));
  await app.register(billingRoutes(ctx));
  await app.register(idleRoutes(ctx));
  await app.register(githubRoutes(ctx));
  await app.register(githubWebhookRoutes(ctx));
  // Ansible plays on hosts: the control plane's SSH key, and plays a previous process left
  // running end as interrupted before any new one can start.
  const plays = new PlayRunner(ctx, ensureSshKey(config.dataDir));
  await recoverInterruptedPlays(ctx);
  await app.register(playRoutes(ctx, plays));

  if (config.dashboardDir && existsSync(config.dashboardDir)) {
    await app.register(fastifyStatic, { root: config.dashboardDir, prefix: "/dashboard/", wildcard: false });
    // Client-side routes under /dashboard/* all load the SPA.
    app.get("/dashboard/*", { schema: { hide: true } }, (_req, reply) => reply.sendFile("index.html"));
    app.get("/", { schema: { hide: true } }, (_req, reply) => reply.redirect("/dashboard/"));
  }

  await seedTemplates(ctx);
  await seedPrices(ctx);
  await bootstrapAdmin(ctx);
  // Made now, so the first login with an unknown email takes no longer than any other.
  await dummyHash(scryptParams(config.passwordScryptN));
  if (config.passwordScryptN < RECOMMENDED_SCRYPT_N) {
    ctx.log.warn(
      { passwordScryptN: config.passwordScryptN, recommended: RECOMMENDED_SCRYPT_N },
      "new password hashes are cheaper than recommended (passwordScryptN): for tests and development only",
    );
  }

  let reaper: NodeJS.Timeout | undefined;
  let stopBilling = () => {};
  return {
    app,
    ctx,
    startReaper() {
      reaper = setInterval(() => {
        reapTick(ctx).catch((err) => ctx.log.error({ err }, "reaper failed"));
        livenessTick(ctx).catch((err) => ctx.log.error({ err }, "liveness check failed"));
        idleTick(ctx).catch((err) => ctx.log.error({ err }, "idle hibernation failed"));
      }, config.reaperIntervalMs);
      reaper.unref();
    },
    startBilling() {
      stopBilling = startBilling(ctx);
    },
    async close() {
      clearInterval(reaper);
      stopBilling();
      await plays.shutdown();
      await app.close();
      await ctx.bus.close();
    },
  };
}
