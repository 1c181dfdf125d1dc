import { INCOMING_FD } from "./confine.ts";
import type { QmpClient } from "./qmp.ts";

/**
 * Restores that do not copy guest RAM (QEMU 7.2, measured by apps/agent/bench/memory.ts).
 *
 * The golden VM runs with its RAM in a file mapped shared, so at snapshot time the file
 * holds every guest page. With the `x-ignore-shared` capability the migration stream skips
 * shared RAM blocks: it carries only device state and the small ROM blocks (tens of KB
 * instead of the whole RAM). A clone maps the same file private and loads that stream with
 * the same capability: its RAM is the golden's pages, faulted in on first touch from the
 * page cache (so clones share every page they have not written), and copy-on-write keeps
 * its writes to itself. This is Kata Containers' VM templating on a plain file.
 *
 * The capability must be on at both ends (the stream records it), and QEMU 7.2 has no
 * `-global migration.x-ignore-shared`, so a clone starts with `-incoming defer`.
 */
export async function ignoreShared(qmp: QmpClient): Promise<void> {
  await qmp.execute("migrate-set-capabilities", {
    capabilities: [{ capability: "x-ignore-shared", state: true }],
  });
}

/** On a clone started with `-incoming defer`: load its inherited stream without guest RAM. */
export async function startMappedIncoming(qmp: QmpClient): Promise<void> {
  await ignoreShared(qmp);
  await qmp.execute("migrate-incoming", { uri: `fd:${INCOMING_FD}` });
}
