/**
 * `make up`: the whole platform on this machine with embedded defaults — control plane on
 * PGlite, one agent with the QEMU backend, Caddy — then prints the dashboard URL.
 * Ctrl-C stops everything it started (processes by PID, the boxes' VMs); so does `make down`.
 */
import { ADMIN_EMAIL, DASHBOARD_URL, DATA } from "./local/settings.ts";
import { startLocalStack, stopLocalStack } from "./local/stack.ts";

let stopping = false;
async function shutdown(code: number) {
  if (stopping) return;
  stopping = true;
  console.log("\ndoppiobox: stopping…");
  await stopLocalStack();
  console.log("doppiobox: stopped");
  process.exit(code);
}
process.on("SIGINT", () => void shutdown(0));
process.on("SIGTERM", () => void shutdown(0));
// A closed terminal, or Ctrl-C on `make up | tee log` (tee dies first): still stop
// everything, even though nothing can be printed any more.
process.on("SIGHUP", () => void shutdown(0));
for (const stream of [process.stdout, process.stderr]) stream.on("error", () => undefined);

try {
  const started = await startLocalStack();
  console.log("");
  console.log(`doppiobox is up: ${DASHBOARD_URL}`);
  if (started.freshAdmin) {
    console.log(`  admin account (shown once): ${ADMIN_EMAIL} / ${started.password}`);
  } else {
    console.log(
      `  admin account: ${ADMIN_EMAIL} (password shown on the first run; kept in ${DATA}/secrets.json)`,
    );
  }
  console.log(`  logs: ${DATA}/*.log — Ctrl-C (or make down) stops everything`);
} catch (err) {
  console.error(`doppiobox: ${err instanceof Error ? err.message : String(err)}`);
  await shutdown(1);
}
