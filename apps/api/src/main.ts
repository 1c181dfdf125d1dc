import { buildControlPlane } from "./app.ts";
import { loadConfig } from "./config.ts";
import { openDatabase } from "./db/client.ts";
import { createLogger } from "./logger.ts";

const config = loadConfig();
const logger = createLogger(config.logLevel);
const database = await openDatabase({
  databaseUrl: config.databaseUrl,
  dataDir: config.dataDir,
  poolSize: config.databasePoolSize,
  log: logger,
});
const cp = await buildControlPlane({ config, database, logger });
cp.startReaper();
cp.startBilling();
const address = await cp.app.listen({ host: config.host, port: config.port });
logger.info({ address, database: database.kind }, "control plane listening");

let stopping = false;
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.on(signal, async () => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, "stopping");
    await cp.close();
    await database.close();
    process.exit(0);
  });
}
