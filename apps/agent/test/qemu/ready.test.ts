import { appendFile, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { noSpaceLeft } from "../../src/jobs/runner.ts";
import { waitReady } from "../../src/vmm/qemu/ready.ts";
import { SmallFs, smallFsUnavailable } from "../support/small-fs.ts";

/**
 * The agent's wait for a guest's READY line (vmm/qemu/ready.ts) against a serial log the
 * test writes as a guest would: the console is the guest's, so whatever it prints there is
 * hostile input to the agent.
 */
describe("waitReady", () => {
  let dir: string;
  let file: string;
  beforeEach(async () => {
    dir = await mkdtemp(path.join(tmpdir(), "doppio-ready-"));
    file = path.join(dir, "serial.log");
    await writeFile(file, "");
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("sees READY written after it started, and passes the guest's progress markers in order", async () => {
    const marks: string[] = [];
    const ready = waitReady(
      file,
      0,
      3,
      10_000,
      async () => true,
      (m) => marks.push(m),
    );
    await appendFile(file, "doppio-t wake\n[    1.0] kernel line\r\ndoppio-t meta\r\n");
    // A marker split across two writes is one marker; one with other text is none.
    await appendFile(file, "doppio-t ne");
    await appendFile(file, "t\nxdoppio-t fake\ndoppio-t Upper\ndoppio-t disk extra\n");
    // Another generation's READY is no end; a marker after this one's READY is not this wait's.
    await appendFile(file, "DOPPIO-READY 2\ndoppio-t ports\nDOPPIO-READY 3\ndoppio-t clock\n");
    await ready;
    expect(marks).toEqual(["wake", "meta", "net", "ports"]);
  });

  it("passes at most 32 markers of a guest that floods them, and still sees its READY", async () => {
    const marks: string[] = [];
    const ready = waitReady(
      file,
      0,
      1,
      10_000,
      async () => true,
      (m) => marks.push(m),
    );
    // 2,000 markers (30 KB, inside the 64 KB window however the reads fall), then once they
    // have been read, a megabyte without a newline: no marker, no match, no growth past the window.
    await appendFile(file, "doppio-t flood\n".repeat(2_000));
    await expect.poll(() => marks.length).toBe(32);
    await appendFile(file, "doppio-t ".repeat(120_000));
    await appendFile(file, "\nDOPPIO-READY 1\n");
    await ready;
    expect(marks).toHaveLength(32);
    expect(new Set(marks)).toEqual(new Set(["flood"]));
  });

  it("does not take another generation's READY, nor one written before `from`", async () => {
    await writeFile(file, "DOPPIO-READY 5\n");
    const from = "DOPPIO-READY 5\n".length;
    const ready = waitReady(file, from, 5, 1_500, async () => true);
    await appendFile(file, "DOPPIO-READY 4\nDOPPIO-READY 55\nDOPPIO-READY 5 \n");
    await expect(ready).rejects.toThrow(/no DOPPIO-READY 5 within 1500 ms/);
  });

  it("fails when the VMM is gone, before its timeout", async () => {
    await expect(waitReady(file, 0, 1, 60_000, async () => false)).rejects.toThrow(/VMM exited/);
  });
});

const whyNoSmallFs = smallFsUnavailable();
if (whyNoSmallFs) console.warn(`SKIPPING waitReady on a full disk: ${whyNoSmallFs} (CI runs as root)`);

/** QEMU writes the console into the log file: on a full disk the guest's READY line can be lost. */
describe.skipIf(whyNoSmallFs !== null)("waitReady on a full disk", () => {
  let base: string;
  let fs: SmallFs;
  beforeEach(async () => {
    base = await mkdtemp(path.join(tmpdir(), "doppio-ready-full-"));
    fs = SmallFs.mount(path.join(base, "data"), 1024 * 1024);
  });
  afterEach(async () => {
    fs.unmount();
    await rm(base, { recursive: true, force: true });
  });

  const failure = (file: string) =>
    waitReady(file, 0, 1, 1_500, async () => true).then(
      () => null,
      (err: Error) => err,
    );

  it("a timeout while the log's filesystem was full says so, with an ENOSPC cause (its job fails disk_full)", async () => {
    const file = path.join(fs.dir, "serial.log");
    await writeFile(file, "");
    fs.fill();
    const err = await failure(file);
    expect(err?.message).toMatch(/no DOPPIO-READY 1 within 1500 ms; .*the host's disk was full meanwhile/);
    expect(noSpaceLeft(err)).toBe(true);
  });

  it("a timeout with room is a plain guest_not_ready", async () => {
    const file = path.join(fs.dir, "serial.log");
    await writeFile(file, "");
    const err = await failure(file);
    expect(err).toMatchObject({ code: "guest_not_ready" });
    expect(err?.message).not.toMatch(/full/);
    expect(noSpaceLeft(err)).toBe(false);
  });
});
