import type { Logger } from "pino";
import type Stripe from "stripe";
import type { WalletNotifier } from "./billing/funds.ts";
import type { ApiConfig } from "./config.ts";
import type { Db } from "./db/client.ts";
import type { ExclusiveTasks } from "./db/exclusive.ts";
import type { GitHub } from "./github/service.ts";
import type { Mailer } from "./mail.ts";
import type { Metrics } from "./metrics.ts";
import type { Bus } from "./realtime/bus.ts";
import type { StreamSlots } from "./realtime/stream-slots.ts";
import type { AccessKeys } from "./services/access.ts";
import type { AgentInFlight } from "./services/agent-in-flight.ts";
import type { ClaimSeats } from "./services/claim-seats.ts";
import type { GitCredentialSource } from "./services/git-credentials.ts";
import type { RateWindow } from "./services/rate-limits.ts";

export interface Clock {
  now(): Date;
}
export const systemClock: Clock = { now: () => new Date() };

/** Everything a route or service needs, built once in app.ts. */
export interface Ctx {
  db: Db;
  /** Where claims hand jobs to agents (Database.claimDb). */
  claimDb: Db;
  /** Work that runs on one replica at a time (services/periodic.ts). */
  tasks: ExclusiveTasks;
  config: ApiConfig;
  clock: Clock;
  bus: Bus;
  log: Logger;
  metrics: Metrics;
  access: AccessKeys;
  /** Short-lived Git credentials for boxes (read per request, so a test may swap it). */
  gitCredentials: GitCredentialSource;
  /** The GitHub App integration, when one is configured. */
  github?: GitHub;
  /** Each server's one claim long-poll on this replica. */
  claimSeats: ClaimSeats;
  /** Each server's other agent requests in this replica's handlers. */
  agentInFlight: AgentInFlight;
  /** Event and log streams each user holds open. */
  streamSlots: StreamSlots;
  /** Box creations per user in the last minute (counted in the database, across replicas). */
  boxCreates: RateWindow;
  /** Email through the configured SMTP server; null when none is configured. */
  mailer: Mailer | null;
  /** Verification links resent per account in the last hour (counted in the database). */
  verificationResends: RateWindow;
  /** Tells a wallet's owner it runs low or ran out. */
  walletNotifier: WalletNotifier;
  /** The Stripe client when card top-ups are configured, else null. */
  stripe: Stripe | null;
}
