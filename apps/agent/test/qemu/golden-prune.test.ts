import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import { afterEach, describe, expect, it } from "vitest";
import type { QemuContext } from "../../src/vmm/qemu/context.ts";
import { pruneGoldenBuilds } from "../../src/vmm/qemu/golden.ts";

describe("pruneGoldenBuilds", () => {
  let dataDir = "";
  afterEach(() => rmSync(dataDir, { recursive: true, force: true }));

  it("keeps the two newest builds and any build a box was restored from; drops crashed builds", async () => {
    dataDir = mkdtempSync(join(tmpdir(), "dbxp-"));
    const root = join(dataDir, "golden", "minimal");
    const dirs = ["1-aaaa", "1-bbbb", "2-cccc", "2-dddd", "2-eeee"].map((n) => join(root, n));
    dirs.forEach((d, i) => {
      mkdirSync(d, { recursive: true });
      writeFileSync(join(d, "manifest.json"), JSON.stringify({ builtAt: `2026-01-0${i + 1}T00:00:00.000Z` }));
    });
    const crashed = join(root, "3-ffff");
    mkdirSync(crashed);
    const ctx = { dataDir, log: pino({ level: "silent" }) } as unknown as QemuContext;
    const removed = await pruneGoldenBuilds(ctx, "minimal", new Set([dirs[0]!]));
    expect(removed.sort()).toEqual([dirs[1], dirs[2], crashed]);
    for (const d of [dirs[0], dirs[3], dirs[4]]) expect(existsSync(d!)).toBe(true);
    expect(existsSync(crashed)).toBe(false);
  });
});
