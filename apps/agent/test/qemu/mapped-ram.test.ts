import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { createReadStream, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LinuxHostNetwork } from "../../src/net/host-network.ts";
import { TCG_CODE_BUFFER_MB } from "../../src/vmm/qemu/args.ts";
import { VMM_MAX_PROCESSES, vmmIdentity } from "../../src/vmm/qemu/confine.ts";
import { QemuExecutor } from "../../src/vmm/qemu/executor.ts";
import { boxPaths } from "../../src/vmm/qemu/layout.ts";
import { readPid } from "../../src/vmm/qemu/process.ts";
import type { GoldenManifest } from "../../src/vmm/qemu/records.ts";
import { restoreBootPaths } from "../../src/vmm/qemu/restore-boot.ts";
import { TestNetns } from "../support/netns.ts";
import {
  boxSpec,
  buildMinimalImage,
  GOLDEN_NET,
  IMAGES_DIR,
  qemuUnavailable,
  REPO,
  RecordingReporter,
  removeAllAndClose,
} from "./support.ts";

const missing = qemuUnavailable();
if (missing)
  console.warn(`SKIPPING mapped-RAM tests: ${missing} (CI must provide root, qemu, iproute2, apt)`);

function sha256(path: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const h = createHash("sha256");
    createReadStream(path)
      .on("data", (c) => h.update(c))
      .on("end", () => resolve(h.digest("hex")))
      .on("error", reject);
  });
}

/**
 * Restores that map the golden's RAM file copy-on-write (vmm/qemu/mapped-ram.ts): what a
 * clone writes, in memory or on disk, stays its own, and the golden's file never changes.
 */
describe.skipIf(missing !== null)("mapped-RAM restores on real QEMU", { timeout: 180_000 }, () => {
  let ns: TestNetns;
  let ex: QemuExecutor;
  let dataDir: string;
  let golden: GoldenManifest;
  let memoryBefore: string;

  beforeAll(async () => {
    ns = TestNetns.create("dbxm");
    dataDir = mkdtempSync(join(tmpdir(), "dbxm-"));
    buildMinimalImage("test");
    const net = new LinuxHostNetwork({ bridge: "br-devbox", cidr: "10.0.0.0/16", netns: ns.name });
    await net.ensureBridge();
    ex = new QemuExecutor({
      dataDir,
      imagesDir: IMAGES_DIR,
      network: net,
      netns: ns.name,
      goldenNet: GOLDEN_NET,
      accel: "auto",
      accelCacheFile: join(REPO, ".data", "qemu-accel.json"),
      goldenMemory: "mapped",
      log: pino({ level: "warn" }),
    });
    const template = {
      name: "minimal",
      version: "1",
      imageVersion: "test",
      readyPorts: [8000, 8888],
      memoryMb: 256,
      vcpu: 1,
    };
    const info = await ex.buildGolden(template, new RecordingReporter());
    expect(info.status).toBe("ready");
    const pointer = JSON.parse(readFileSync(join(dataDir, "golden", "minimal", "current.json"), "utf8"));
    golden = JSON.parse(readFileSync(pointer.manifest, "utf8"));
    memoryBefore = await sha256(golden.memoryFile!);
  }, 240_000);

  afterAll(async () => {
    await removeAllAndClose(ex);
    ns?.destroy();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it("the golden's RAM is a file of the guest's size; its migration stream carries device state only", () => {
    expect(golden.memoryFile).toBeDefined();
    expect(statSync(golden.memoryFile!).size).toBe(256 * 1024 ** 2);
    // A streamed golden of this image writes ~95 MB here (bench/memory.ts prints both).
    expect(statSync(golden.vmstate).size).toBeLessThan(1024 ** 2);
  });

  it("two clones write different data in memory and on disk and never see each other's", async () => {
    const clones = [
      ["mem-a", "10.0.0.2"],
      ["mem-b", "10.0.0.3"],
    ] as const;
    await Promise.all(
      clones.map(([slug, ip]) => ex.createFromGolden(boxSpec(slug, ip), new RecordingReporter())),
    );
    for (const [slug, ip] of clones) {
      // Each clone maps the golden's file private (copy-on-write), never shared.
      const pid = await readPid(boxPaths(dataDir, slug).pid);
      const maps = readFileSync(`/proc/${pid}/maps`, "utf8")
        .split("\n")
        .filter((l) => l.endsWith(golden.memoryFile!));
      expect(maps.length).toBeGreaterThan(0);
      for (const l of maps) expect(l.split(/\s+/)[1]).toMatch(/^r.-p$/);
      expect(ns.curl(`http://${ip}:8000/cgi-bin/data?mem`, `ram of ${slug}`).trim()).toBe("stored");
      expect(ns.curl(`http://${ip}:8000/cgi-bin/data`, `disk of ${slug}`).trim()).toBe("stored");
    }
    for (const [slug, ip] of clones) {
      expect(ns.curl(`http://${ip}:8000/cgi-bin/data?mem`).trim()).toBe(`ram of ${slug}`);
      expect(ns.curl(`http://${ip}:8000/cgi-bin/data`).trim()).toBe(`disk of ${slug}`);
      expect(ns.curl(`http://${ip}:8000/`).trim()).toBe(slug);
    }
    // A clone restored after both wrote starts from the golden's pages, not theirs.
    await ex.createFromGolden(boxSpec("mem-c", "10.0.0.4"), new RecordingReporter());
    expect(ns.curl("http://10.0.0.4:8000/cgi-bin/data?mem").trim()).toBe("(none)");
    expect(ns.curl("http://10.0.0.4:8000/cgi-bin/data").trim()).toBe("(none)");
    expect(ns.curl("http://10.0.0.4:8000/").trim()).toBe("mem-c");
  });

  it("a clone's VMM gets the golden's stand-in kernel and initrd, not the image's (restore-boot.ts)", async () => {
    const stand = restoreBootPaths(golden.dir);
    const cmdline = readFileSync(
      `/proc/${await readPid(boxPaths(dataDir, "mem-a").pid)}/cmdline`,
      "utf8",
    ).split("\0");
    expect(cmdline[cmdline.indexOf("-kernel") + 1]).toBe(stand.kernel);
    expect(cmdline[cmdline.indexOf("-initrd") + 1]).toBe(stand.initrd);
    // The image's boot sector, header and setup code only; nothing of the initrd.
    const kernel = readFileSync(golden.kernel);
    const head = readFileSync(stand.kernel);
    expect(head.length).toBe((kernel[0x1f1]! + 1) * 512);
    expect(head.equals(kernel.subarray(0, head.length))).toBe(true);
    expect(kernel.length).toBeGreaterThan(100 * head.length);
    expect(statSync(stand.initrd).size).toBe(0);
  });

  it("each clone's VMM runs as its own uid with no capabilities under seccomp, and that uid reaches no other box (confine.ts)", async () => {
    const vmm = async (slug: string, ip: string) => {
      const pid = (await readPid(boxPaths(dataDir, slug).pid))!;
      const status = readFileSync(`/proc/${pid}/status`, "utf8");
      const field = (name: string) =>
        new RegExp(`^${name}:\\s*(.*)$`, "m").exec(status)![1]!.trim().split(/\s+/);
      return { pid, id: vmmIdentity(ip, 16), field };
    };
    const a = await vmm("mem-a", "10.0.0.2");
    const b = await vmm("mem-b", "10.0.0.3");
    expect(a.id.uid).not.toBe(b.id.uid);
    for (const { pid, id, field } of [a, b]) {
      expect(field("Uid")).toEqual(Array(4).fill(String(id.uid)));
      expect(field("Gid")).toEqual(Array(4).fill(String(id.gid)));
      expect(field("Groups")).toEqual([String(id.gid)]);
      expect(field("CapEff")).toEqual(["0000000000000000"]);
      expect(field("CapPrm")).toEqual(["0000000000000000"]);
      expect(field("NoNewPrivs")).toEqual(["1"]);
      expect(field("Seccomp")).toEqual(["2"]);
      const limits = readFileSync(`/proc/${pid}/limits`, "utf8");
      expect(limits).toMatch(new RegExp(`^Max processes +${VMM_MAX_PROCESSES} +${VMM_MAX_PROCESSES} `, "m"));
    }
    // What an escape into mem-a's VMM could do: act as its uid.
    const asA = (script: string) =>
      spawnSync(
        "setpriv",
        [`--reuid=${a.id.uid}`, `--regid=${a.id.gid}`, "--clear-groups", "sh", "-c", script],
        { encoding: "utf8" },
      );
    const own = boxPaths(dataDir, "mem-a");
    const other = boxPaths(dataDir, "mem-b");
    expect(asA(`head -c 1 ${own.volume} > /dev/null`).status).toBe(0);
    for (const attempt of [
      `head -c 1 ${other.volume}`,
      `head -c 1 ${other.overlay}`,
      `ls ${other.dir}`,
      `ls ${dataDir}/boxes`,
      `kill -0 ${b.pid}`,
      `head -c 1 /proc/${b.pid}/environ`,
    ]) {
      const r = asA(attempt);
      expect(r.status, attempt).not.toBe(0);
      expect(r.stderr, attempt).toMatch(/Permission denied|Operation not permitted/);
    }
  });

  it("a clone's QEMU holds at most TCG_CODE_BUFFER_MB of translated code, not QEMU's default 1 GiB (args.ts)", async () => {
    if (golden.accel !== "tcg") return expect(golden.accel).toBe("kvm"); // KVM translates nothing
    const pid = (await readPid(boxPaths(dataDir, "mem-a").pid))!;
    // QEMU maps its whole code buffer at start: anonymous and executable, split by guard pages.
    let bytes = 0;
    for (const line of readFileSync(`/proc/${pid}/maps`, "utf8").split("\n")) {
      const [range, perms, , , inode, name] = line.split(/\s+/);
      if (!range || !perms?.includes("x") || inode !== "0" || name) continue;
      const [from, to] = range.split("-").map((h) => Number.parseInt(h, 16));
      bytes += to! - from!;
    }
    expect(bytes).toBeLessThanOrEqual(TCG_CODE_BUFFER_MB * 1024 * 1024);
    expect(bytes).toBeGreaterThan((TCG_CODE_BUFFER_MB / 2) * 1024 * 1024);
  });

  it("the golden's memory file is never modified by its clones", async () => {
    expect(await sha256(golden.memoryFile!)).toBe(memoryBefore);
  });
});
