import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { goldenStatus } from "../../src/images/golden-status.ts";
import { ImageStore } from "../../src/images/store.ts";
import type { GoldenInfo } from "../../src/vmm/executor.ts";

const NOW = new Date("2026-11-29T10:00:00Z");

/** What an executor reports: a golden made from `imageVersion` (the overlay's input). */
const executor = (status: GoldenInfo["status"], imageVersion: string | null) => ({
  goldenStatus: async (template: string): Promise<GoldenInfo> => ({
    template,
    version: "1",
    status,
    builtAt: null,
    error: null,
    imageVersion,
  }),
});

describe("golden status against the image store", () => {
  let dir: string;
  let store: ImageStore;

  const commit = async (version: string) => {
    const build = join(store.templateDir("code"), `.incoming-${version}`);
    mkdirSync(build, { recursive: true });
    for (const f of ["vmlinuz", "initrd.img", "rootfs.qcow2"]) writeFileSync(join(build, f), "x");
    writeFileSync(join(build, "manifest.json"), JSON.stringify({ template: "code", inputsHash: version }));
    await store.commit("code", build, version);
  };

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), "dbx-golden-status-"));
    store = new ImageStore(dir);
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("is the executor's status while the store has no current image (legacy layout)", async () => {
    expect((await goldenStatus(executor("ready", "1"), store, "code")).status).toBe("ready");
    expect((await goldenStatus(executor("ready", "1"), null, "code")).status).toBe("ready");
  });

  it("is stale while the store marks the golden stale for the current image", async () => {
    await commit("v2");
    await store.markGoldenStale("code", "v2", NOW);
    expect(await goldenStatus(executor("ready", "1"), store, "code")).toMatchObject({
      status: "stale",
      version: "1",
      imageVersion: "1",
    });
    // Even a golden recording no image version: the store's mark decides.
    expect((await goldenStatus(executor("ready", null), store, "code")).status).toBe("stale");
  });

  it("is stale when the golden was made from another image than the current one", async () => {
    await store.markGoldenFresh("code", "v2");
    expect((await goldenStatus(executor("ready", "1"), store, "code")).status).toBe("stale");
    expect((await goldenStatus(executor("ready", "v2"), store, "code")).status).toBe("ready");
    expect((await goldenStatus(executor("ready", null), store, "code")).status).toBe("ready");
  });

  it("leaves building, failed and missing alone", async () => {
    await commit("v3");
    await store.markGoldenStale("code", "v3", NOW);
    for (const s of ["building", "failed", "missing"] as const)
      expect((await goldenStatus(executor(s, null), store, "code")).status).toBe(s);
  });
});
