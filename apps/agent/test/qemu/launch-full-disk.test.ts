import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { noSpaceLeft } from "../../src/jobs/runner.ts";
import { launchQemu } from "../../src/vmm/qemu/process.ts";
import { SmallFs, smallFsUnavailable } from "../support/small-fs.ts";

const whyNoSmallFs = smallFsUnavailable();
if (whyNoSmallFs) console.warn(`SKIPPING launchQemu on a full disk: ${whyNoSmallFs} (CI runs as root)`);

/**
 * QEMU writes its own errors into a log file on the data dir: on a full disk it fails to
 * create its files, and its message about that is lost too. A "QEMU" that writes its error
 * and exits 1 stands in for it here (the launch code does not care what the binary is).
 */
describe.skipIf(whyNoSmallFs !== null)("launchQemu when QEMU ends at start", () => {
  let base: string;
  let fs: SmallFs;
  beforeEach(async () => {
    base = await mkdtemp(path.join(tmpdir(), "doppio-launch-full-"));
    fs = SmallFs.mount(path.join(base, "data"), 1024 * 1024);
  });
  afterEach(async () => {
    fs.unmount();
    await rm(base, { recursive: true, force: true });
  });

  const launch = () =>
    launchQemu({
      qemuBinary: "/bin/sh",
      args: ["-c", "echo 'qemu-system-x86_64: cannot create the pid file' >&2; exit 1"],
      logFile: path.join(fs.dir, "qemu.log"),
      pidFile: path.join(fs.dir, "qemu.pid"),
      qmpSocket: path.join(fs.dir, "qmp.sock"),
      netns: null,
    }).then(
      () => null,
      (err: Error) => err,
    );

  it("on a full disk (its message lost) fails with an ENOSPC cause, so its job fails disk_full", async () => {
    fs.fill();
    const err = await launch();
    expect(err).toMatchObject({ code: "spawn_failed" });
    expect(err?.message).toMatch(/qemu ended at start \(exit 1\): ; the host's disk is full/);
    expect(noSpaceLeft(err)).toBe(true);
  });

  it("with room it fails spawn_failed with QEMU's own message, not disk_full", async () => {
    const err = await launch();
    expect(err).toMatchObject({ code: "spawn_failed" });
    expect(err?.message).toMatch(/cannot create the pid file/);
    expect(noSpaceLeft(err)).toBe(false);
  });
});
