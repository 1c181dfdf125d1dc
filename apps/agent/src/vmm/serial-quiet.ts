import { stat } from "node:fs/promises";
import { setTimeout as delay } from "node:timers/promises";

/**
 * Waits until the guest's serial log has not grown for `quietMs` (at most `maxMs`). Called
 * before a golden snapshot: the guest copies its services' logs to the console once a
 * second, so lines written just before readiness would otherwise be copied only after a
 * restore, into every clone's log, as if the clone had printed them.
 */
export async function waitSerialQuiet(serialLog: string, quietMs = 1500, maxMs = 15_000): Promise<void> {
  const size = () =>
    stat(serialLog).then(
      (s) => s.size,
      () => 0,
    );
  const deadline = Date.now() + maxMs;
  let last = await size();
  let since = Date.now();
  while (Date.now() - since < quietMs && Date.now() < deadline) {
    await delay(100);
    const now = await size();
    if (now !== last) {
      last = now;
      since = Date.now();
    }
  }
}
