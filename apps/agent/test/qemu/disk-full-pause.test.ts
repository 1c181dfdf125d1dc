import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { noSpaceLeft } from "../../src/jobs/runner.ts";
import type { QemuExecutor } from "../../src/vmm/qemu/executor.ts";
import { vmStatus } from "../../src/vmm/qemu/io-pause.ts";
import { boxPaths } from "../../src/vmm/qemu/layout.ts";
import { TestNetns } from "../support/netns.ts";
import { SmallFs, smallFsUnavailable } from "../support/small-fs.ts";
import {
  boxSpec,
  buildMinimalImage,
  minimalGoldenExecutor,
  qemuUnavailable,
  RecordingReporter,
  removeAllAndClose,
} from "./support.ts";

const missing = qemuUnavailable() ?? smallFsUnavailable();
if (missing)
  console.warn(
    `SKIPPING the QEMU full-disk pause test: ${missing} (CI must provide root, qemu, iproute2, apt)`,
  );

/**
 * Room for the golden build (its mapped RAM file), one box and the volume pool, on an ext4
 * (small-fs.ts: on a full tmpfs QEMU dies instead of pausing).
 */
const DATA_FS_BYTES = 1024 * 1024 * 1024;

/**
 * A box whose guest writes while the host's data dir is full: QEMU pauses the VM (status
 * `io-error`, its default werror=enospc) and keeps it paused after the space is freed;
 * `resumeIfIoPaused` (called by reconcile) lets it run again.
 */
describe.skipIf(missing !== null)("a QEMU guest paused on a full disk", { timeout: 240_000 }, () => {
  let ns: TestNetns;
  let base: string;
  let fs: SmallFs;
  let ex: QemuExecutor;
  const slug = "full-disk";
  /** The guest's port 8000 as the namespace reaches it (set by the first test). */
  let hostPort = "";

  const status = () => vmStatus(boxPaths(fs.dir, slug).qmp);

  beforeAll(async () => {
    ns = TestNetns.create();
    base = mkdtempSync(join(tmpdir(), "dbxfull-"));
    fs = SmallFs.mount(join(base, "data"), DATA_FS_BYTES, "ext4");
    buildMinimalImage("test");
    // User-mode networking: the guest's port 8000 on the namespace's loopback.
    ex = await minimalGoldenExecutor({
      dataDir: fs.dir,
      network: null,
      netns: ns.name,
      imageVersion: "test",
    });
  }, 300_000);

  afterAll(async () => {
    await removeAllAndClose(ex);
    ns?.destroy();
    if (fs) {
      fs.free();
      // A volume-pool refill may still hold a file for a moment.
      for (let i = 0; i < 50; i++) {
        try {
          fs.unmount();
          break;
        } catch {
          await new Promise((r) => setTimeout(r, 200));
        }
      }
    }
    if (base) rmSync(base, { recursive: true, force: true });
  });

  it("stays paused after the disk is freed until resumeIfIoPaused lets it run, then answers and stores", async () => {
    const up = await ex.createFromGolden(
      boxSpec(slug, "10.0.0.2", 1, { tap: false }),
      new RecordingReporter(),
    );
    hostPort = up(8000) ?? "";
    const url = `http://${hostPort}/cgi-bin/data`;
    expect(ns.curl(url).trim()).toBe("(none)");
    expect(await ex.resumeIfIoPaused(slug)).toBe(false);

    // The pool's refill after the create is done: a refill failing on the full disk would
    // remove its half-made volume, and the guest's write would get that room.
    await ex.volumePool?.idle();
    fs.fill();
    // 8 MiB to the guest's data volume, then sync: the host cannot allocate its blocks.
    const body = join(base, "body");
    writeFileSync(body, Buffer.alloc(8 * 1024 * 1024, 65));
    const post = (seconds: number) =>
      ns.exec(
        "curl",
        ["-sS", "--fail", "--max-time", String(seconds), "--data-binary", `@${body}`, url],
        (seconds + 10) * 1_000,
      );
    expect(() => post(15)).toThrow();
    expect(await status()).toBe("io-error");
    fs.free();
    await new Promise((r) => setTimeout(r, 1_000));
    // Freed, and still paused: nothing but a resume brings it back.
    expect(await status()).toBe("io-error");
    expect(await ex.inspect(slug)).toBe("running");

    expect(await ex.resumeIfIoPaused(slug)).toBe(true);
    expect(await status()).toBe("running");
    expect(await ex.resumeIfIoPaused(slug)).toBe(false);
    // The guest answers and stores again. (The request the pause held up went on after the
    // resume with what its client had sent; a store may race its rename, so it is retried.)
    const after = "after the pause";
    // The size first: the held-up request's marker is megabytes, more than a test reads.
    const markerSize = () =>
      Number(ns.exec("curl", ["-sS", "--fail", "-o", "/dev/null", "-w", "%{size_download}", url]));
    let size = 0;
    for (let i = 0; i < 20 && size !== after.length; i++) {
      if (ns.curl(url, after).trim() === "stored") size = markerSize();
      if (size !== after.length) await new Promise((r) => setTimeout(r, 500));
    }
    expect(ns.curl(url).trim()).toBe(after);
  });

  it("a hibernate while the data dir is full fails with a full-disk error, and the guest runs on", async () => {
    await ex.volumePool?.idle();
    fs.fill();
    let failure: unknown = null;
    try {
      await ex.hibernate(slug, new RecordingReporter());
    } catch (err) {
      failure = err;
    } finally {
      fs.free();
    }
    // QEMU's own error is a broken pipe (the agent's end of the stream closed on ENOSPC);
    // the job runner must still see the full disk to report `disk_full` (jobs/runner.ts).
    expect(failure, "the hibernate succeeded on a full disk").not.toBeNull();
    expect(noSpaceLeft(failure), String(failure)).toBe(true);
    // The failed save let the guest run again (`cont`). A write it made before the disk was
    // freed (its page cache flushing) pauses it on `io-error`, as any full disk does, and
    // reconcile's resumeIfIoPaused lets it go on; the save must not leave it `paused`.
    if ((await status()) === "io-error") expect(await ex.resumeIfIoPaused(slug)).toBe(true);
    expect(await status()).toBe("running");
    expect(await ex.inspect(slug)).toBe("running");
    expect(ns.curl(`http://${hostPort}/cgi-bin/data?mem`).trim()).toBe("(none)");
  });

  it("a guest paused on a full disk while it boots goes on once there is room, and its start succeeds", async () => {
    await ex.stop(slug, new RecordingReporter());
    await ex.volumePool?.idle();
    // The disk fills as the start begins to wait for READY: the booting guest's writes
    // (its filesystems, its new identity) meet it, and QEMU pauses the guest.
    let paused = false;
    let watching: Promise<void> = Promise.resolve();
    class FillOnWait extends RecordingReporter {
      override step<T>(name: Parameters<RecordingReporter["step"]>[0], fn: () => Promise<T>): Promise<T> {
        if (name === "wait_ready") {
          fs.fill();
          watching = (async () => {
            for (let i = 0; i < 150 && !paused; i++) {
              paused = (await status().catch(() => "")) === "io-error";
              if (!paused) await new Promise((r) => setTimeout(r, 100));
            }
            fs.free();
          })();
        }
        return super.step(name, fn);
      }
    }
    const up = await ex.start(boxSpec(slug, "10.0.0.2", 2, { tap: false }), new FillOnWait());
    await watching;
    expect(paused, "the booting guest never paused on the full disk").toBe(true);
    expect(await status()).toBe("running");
    // Booted from its disks: what the first test stored is there.
    expect(ns.curl(`http://${up(8000)}/cgi-bin/data`).trim()).toBe("after the pause");
  });

  it("a create while the data dir is full fails with a full-disk error, and leaves nothing behind", async () => {
    await ex.volumePool?.idle();
    fs.fill();
    let failure: unknown = null;
    try {
      await ex.createFromGolden(boxSpec("no-room", "10.0.0.3", 1, { tap: false }), new RecordingReporter());
    } catch (err) {
      failure = err;
    } finally {
      fs.free();
    }
    // The job runner reports such an error as `disk_full` (jobs/runner.ts).
    expect(failure, "the create succeeded on a full disk").not.toBeNull();
    expect(noSpaceLeft(failure), String(failure)).toBe(true);
    expect((await ex.list()).map((b) => b.slug)).not.toContain("no-room");
  });
});
