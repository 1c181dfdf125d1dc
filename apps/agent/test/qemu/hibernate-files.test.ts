import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { discardSavedMemory, hibernationPaths, savedMemory } from "../../src/vmm/qemu/hibernate.ts";
import { type BoxPaths, boxPaths } from "../../src/vmm/qemu/layout.ts";

// What counts as a box's saved memory, without QEMU: only a complete stream under its final
// name, with a manifest that agrees on its size. (The real save is in hibernate.test.ts.)
describe("saved memory on disk", () => {
  let dataDir: string;
  let paths: BoxPaths;
  const manifest = (bytes: number) =>
    JSON.stringify({ memoryMb: 256, vcpu: 1, bytes, savedAt: "2026-01-01T00:00:00.000Z" });

  beforeEach(() => {
    dataDir = mkdtempSync(join(tmpdir(), "dbxh-"));
    paths = boxPaths(dataDir, "hib-files");
    mkdirSync(paths.dir, { recursive: true });
  });
  afterEach(() => rmSync(dataDir, { recursive: true, force: true }));

  it("a complete stream with a matching manifest is saved memory", async () => {
    const h = hibernationPaths(paths);
    writeFileSync(h.vmstate, Buffer.alloc(4096, 1));
    writeFileSync(h.manifest, manifest(4096));
    expect(await savedMemory(paths)).toMatchObject({
      vmstate: h.vmstate,
      bytes: 4096,
      memoryMb: 256,
      vcpu: 1,
    });
  });

  it("a partial stream (never renamed) is not", async () => {
    const h = hibernationPaths(paths);
    writeFileSync(h.partial, Buffer.alloc(4096, 1));
    writeFileSync(h.manifest, manifest(4096));
    expect(await savedMemory(paths)).toBeNull();
  });

  it("a stream shorter or longer than its manifest says is not", async () => {
    const h = hibernationPaths(paths);
    writeFileSync(h.manifest, manifest(4096));
    writeFileSync(h.vmstate, Buffer.alloc(4000, 1));
    expect(await savedMemory(paths)).toBeNull();
    writeFileSync(h.vmstate, Buffer.alloc(5000, 1));
    expect(await savedMemory(paths)).toBeNull();
  });

  it("a stream without a manifest is not, and discarding removes every piece", async () => {
    const h = hibernationPaths(paths);
    writeFileSync(h.vmstate, Buffer.alloc(4096, 1));
    expect(await savedMemory(paths)).toBeNull();
    writeFileSync(h.manifest, manifest(4096));
    writeFileSync(h.partial, "x");
    await discardSavedMemory(paths);
    expect(await savedMemory(paths)).toBeNull();
    for (const f of [h.vmstate, h.partial, h.manifest]) {
      expect(() => rmSync(f)).toThrow();
    }
  });
});
