import { existsSync, readdirSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  boxJobs,
  startAgent,
  startCp,
  type TestAgent,
  type TestCp,
  waitForBox,
  waitForHeartbeat,
} from "./support/agent-harness.ts";
import { FAKE_DISK_BYTES } from "./support/fake-executor.ts";
import { SmallFs, smallFsUnavailable } from "./support/small-fs.ts";

const why = smallFsUnavailable();
if (why) console.warn(`SKIPPING the full-disk test: ${why}`);

/**
 * The filesystem that holds boxes' disks fills up (a real size-limited tmpfs, written until
 * ENOSPC): a create then fails with the code `disk_full`, leaves no half-written disk and
 * gives back its address; existing boxes' disks are untouched; once space is freed the
 * broken box can be deleted and creates work again.
 */
describe.skipIf(why !== null)("a full disk on the host", () => {
  let cp: TestCp;
  let a: TestAgent;
  let dir: string;
  let fs: SmallFs;

  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), "doppio-disks-"));
    fs = SmallFs.mount(path.join(dir, "disks"), 4 * 1024 * 1024);
    cp = await startCp();
    a = await startAgent({ cpUrl: cp.url, token: cp.agentToken, fake: { disksDir: fs.dir } });
    await waitForHeartbeat(cp);
  });
  afterAll(async () => {
    await a?.close();
    await cp?.close();
    fs?.unmount();
    await rm(dir, { recursive: true, force: true });
  });

  it("fails creates with disk_full while full, corrupts nothing, and works once freed", async () => {
    await cp.admin.post("/api/v1/boxes", { template: "minimal", name: "before" });
    await waitForBox(cp, "before", "running");

    expect(fs.fill()).toBeGreaterThan(0);
    await cp.admin.post("/api/v1/boxes", { template: "minimal", name: "squeezed" });
    const box = await waitForBox(cp, "squeezed", "error");
    expect(box.errorCode).toBe("disk_full");
    expect(box.statusReason).toMatch(/ENOSPC|no space left/i);
    const [job] = await boxJobs(cp, "squeezed");
    expect(job).toMatchObject({ status: "failed", errorCode: "disk_full" });
    expect(job.steps.find((s: { name: string }) => s.name === "prepare_disks")).toMatchObject({
      status: "failed",
    });
    // No half-written disk, no address kept, the other box untouched.
    expect(existsSync(path.join(fs.dir, "squeezed.img"))).toBe(false);
    expect(a.agent.ipPool.get("squeezed")).toBeNull();
    expect(a.fake.vm("before")?.state).toBe("running");

    fs.free();
    expect((await cp.admin.del("/api/v1/boxes/squeezed")).status).toBe(202);
    await cp.admin.post("/api/v1/boxes", { template: "minimal", name: "after" });
    await waitForBox(cp, "after", "running");
    expect(readdirSync(fs.dir).sort()).toEqual(["after.img", "before.img"]);
    for (const name of ["after.img", "before.img"]) {
      expect(readFileSync(path.join(fs.dir, name))).toEqual(Buffer.alloc(FAKE_DISK_BYTES, 1));
    }
  });
});
