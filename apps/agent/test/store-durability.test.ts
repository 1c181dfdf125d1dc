import { execFileSync, spawnSync } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";

const CHILD = path.join(import.meta.dirname, "support/outbox-fsync-child.ts");

function hasStrace(): string | null {
  try {
    execFileSync("strace", ["-V"], { stdio: "ignore" });
    return null;
  } catch {
    return "strace is not installed (scripts/bootstrap.sh installs it)";
  }
}
const why = hasStrace();
if (why) console.warn(`SKIPPING outbox durability: ${why}`);

/**
 * The outbox's write path, traced: step and log events are committed without waiting for
 * the disk, and the deliverer syncs them before any leaves the host, so the control plane
 * never holds an event a power loss could take from the agent (and number again).
 */
describe.skipIf(why !== null)("agent outbox durability (real SQLite under strace)", () => {
  it("appends without fsync, syncs once before sending, and the result is durable", async () => {
    const dir = await mkdtemp(path.join(tmpdir(), "doppio-fsync-"));
    try {
      const trace = path.join(dir, "trace");
      const run = spawnSync(
        "strace",
        [
          "-f",
          "-e",
          "trace=fsync,fdatasync,write",
          "-s",
          "32",
          "-o",
          trace,
          process.execPath,
          "--import",
          "tsx",
          CHILD,
          dir,
        ],
        { encoding: "utf8", cwd: path.join(import.meta.dirname, "..") },
      );
      expect(run.status, run.stderr).toBe(0);
      const phases = new Map<string, { syncs: number; order: number }>();
      let phase = "open";
      let order = 0;
      for (const line of (await readFile(trace, "utf8")).split("\n")) {
        const marker = /write\(1, "MARK (\w+)\\n"/.exec(line);
        if (marker) {
          phase = marker[1]!;
          phases.set(phase, { syncs: 0, order: order++ });
        } else if (/\bf(data)?sync\(/.test(line) && phases.has(phase)) {
          phases.get(phase)!.syncs++;
        }
      }
      expect([...phases.keys()]).toEqual(["append", "deliver", "send", "finish", "end"]);
      // 20 events, no disk wait on the agent's thread.
      expect(phases.get("append")!.syncs).toBe(0);
      // Before the request carrying them goes out, they are on disk.
      expect(phases.get("deliver")!.syncs).toBeGreaterThan(0);
      // The result and the job's `done` are committed durably, as before.
      expect(phases.get("finish")!.syncs).toBeGreaterThan(0);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
