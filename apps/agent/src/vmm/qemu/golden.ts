import { randomBytes, randomUUID } from "node:crypto";
import { access, chmod, readdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { makeDirs } from "../../make-dirs.ts";
import { macForIp } from "../../net/naming.ts";
import type { BoxMetadata, StepReporter, TemplateSpec } from "../executor.ts";
import { waitSerialQuiet } from "../serial-quiet.ts";
import { qemuArgs } from "./args.ts";
import type { QemuContext } from "./context.ts";
import { createOverlay, createSparse } from "./disks.ts";
import { QemuError } from "./errors.ts";
import { goldenBuildPaths, goldenTemplateDir, imagePaths } from "./layout.ts";
import { ignoreShared } from "./mapped-ram.ts";
import { writeMetadataFile } from "./metadata.ts";
import { isVmProcess, killVm, launchQemu } from "./process.ts";
import { type QmpClient, waitMigration } from "./qmp.ts";
import { waitReady } from "./ready.ts";
import { type GoldenManifest, readJson, writeJson } from "./records.ts";
import { writeRestoreBoot } from "./restore-boot.ts";

/** Generation of the golden build's metadata; boxes always run with 1 or more. */
const GOLDEN_GENERATION = 0;
/** The golden VM's data disk is a placeholder it never mounts (clones get their own). */
const PLACEHOLDER_BYTES = 1024 * 1024;

function currentGoldenFile(ctx: QemuContext, template: string): string {
  return join(goldenTemplateDir(ctx.dataDir, template), "current.json");
}

export async function currentGolden(ctx: QemuContext, template: string): Promise<GoldenManifest | null> {
  const pointer = await readJson<{ manifest: string }>(currentGoldenFile(ctx, template));
  if (!pointer) return null;
  const manifest = await readJson<GoldenManifest>(pointer.manifest);
  if (!manifest) return null;
  const present = await Promise.all(
    [manifest.disk, manifest.vmstate, ...(manifest.memoryFile ? [manifest.memoryFile] : [])].map((f) =>
      access(f).then(
        () => true,
        () => false,
      ),
    ),
  );
  return present.every(Boolean) ? manifest : null;
}

/**
 * Boots the template image with the golden identity and the template's (larger) memory,
 * waits until its services answer, pauses it and saves the migration stream with
 * `exec:cat` (QEMU 7.2 has no `file:` URI); a mapped golden keeps its RAM in its own
 * file instead of the stream (mapped-ram.ts). Its root disk becomes every clone's backing
 * file, so each build goes to a new directory and never replaces a disk in use.
 */
export async function buildGoldenSnapshot(
  ctx: QemuContext,
  t: TemplateSpec,
  report: StepReporter,
): Promise<GoldenManifest> {
  const img = imagePaths(ctx.imagesDir, t.name, t.imageVersion);
  for (const f of [img.kernel, img.initrd, img.rootfs]) {
    await access(f).catch((err) => {
      throw new QemuError(
        "image_missing",
        `template image file ${f} missing (run scripts/build-image.sh)`,
        err,
      );
    });
  }
  const { accel, tscKhz } = await ctx.resolveAccel(img.kernel, img.initrd);
  const p = goldenBuildPaths(ctx.dataDir, t.name, t.version, randomBytes(4).toString("hex"));
  const mac = macForIp(ctx.goldenNet.ip);
  const mapped = ctx.goldenMemory === "mapped";
  const started = Date.now();
  let pid: number | null = null;
  let qmp: QmpClient | null = null;
  try {
    await report.step("prepare_disks", async () => {
      await makeDirs(p.dir);
      await createOverlay(img.rootfs, p.disk);
      await createSparse(p.dataPlaceholder, PLACEHOLDER_BYTES);
      await writeMetadataFile(p.meta, goldenMetadata(ctx, t, mac));
    });
    const launched = await report.step("boot_vm", () =>
      launchQemu({
        qemuBinary: ctx.qemuBinary,
        netns: ctx.netns,
        logFile: p.qemuLog,
        pidFile: p.pid,
        qmpSocket: p.qmp,
        args: qemuArgs({
          accel,
          tcgCodeBufferMb: ctx.tcgCodeBufferMb,
          tscKhz,
          memoryMb: t.memoryMb,
          vcpu: t.vcpu,
          kernel: img.kernel,
          initrd: img.initrd,
          rootDisk: p.disk,
          dataDisk: { path: p.dataPlaceholder, format: "raw" },
          net: { kind: "none", mac },
          metaFile: p.meta,
          serialLog: p.serial,
          qmpSocket: p.qmp,
          pidFile: p.pid,
          ...(mapped ? { memoryFile: { path: p.memory, share: true } } : {}),
        }),
      }),
    );
    pid = launched.pid;
    qmp = launched.qmp;
    const livePid = pid;
    await report.step("wait_ready", () =>
      waitReady(p.serial, 0, GOLDEN_GENERATION, ctx.readyTimeoutMs, () => isVmProcess(livePid, p.dir)),
    );
    await report.step("snapshot_vm", async () => {
      await waitSerialQuiet(p.serial);
      const q = qmp!;
      await q.execute("migrate-set-parameters", { "max-bandwidth": 8 * 1024 ** 3 });
      if (mapped) await ignoreShared(q);
      await q.execute("stop");
      await q.execute("migrate", { uri: `exec:cat > ${p.vmstate}` });
      await waitMigration(q, 120_000, "the snapshot migration");
      await killVm(livePid, p.dir, p.qmp);
    });
    qmp.close();
    qmp = null;
    await writeRestoreBoot(img.kernel, p.dir);
    await chmod(p.disk, 0o444);
    await createOverlay(p.disk, p.overlayTemplate);
    // Documentation more than protection (root ignores it): clones map it private, read-write.
    if (mapped) await chmod(p.memory, 0o444);
    const manifest: GoldenManifest = {
      template: t.name,
      version: t.version,
      imageVersion: t.imageVersion,
      dir: p.dir,
      accel,
      tscKhz,
      memoryMb: t.memoryMb,
      vcpu: t.vcpu,
      kernel: img.kernel,
      initrd: img.initrd,
      disk: p.disk,
      vmstate: p.vmstate,
      ...(mapped ? { memoryFile: p.memory } : {}),
      overlayTemplate: p.overlayTemplate,
      mac,
      readyPorts: t.readyPorts,
      builtAt: ctx.now().toISOString(),
    };
    await writeJson(p.manifest, manifest);
    await writeJson(currentGoldenFile(ctx, t.name), { manifest: p.manifest });
    await rm(p.qmp, { force: true });
    await rm(p.pid, { force: true });
    ctx.log.info(
      { template: t.name, version: t.version, imageVersion: t.imageVersion, ms: Date.now() - started, accel },
      "golden snapshot built",
    );
    return manifest;
  } catch (err) {
    qmp?.close();
    if (pid !== null) await killVm(pid, p.dir, p.qmp).catch(() => undefined);
    await rm(p.dir, { recursive: true, force: true });
    if (err instanceof QemuError && err.code === "image_missing") throw err;
    throw new QemuError(
      "golden_build_failed",
      `golden build of ${t.name}@${t.version} failed: ${(err as Error).message}`,
      { cause: err },
    );
  }
}

function goldenMetadata(ctx: QemuContext, t: TemplateSpec, mac: string): BoxMetadata {
  const placeholder = () => randomUUID().replaceAll("-", "");
  return {
    slug: `golden-${t.name}`,
    site_url: "",
    code_url: "",
    env: {},
    network: { ...ctx.goldenNet, mac, dns: [] },
    // The golden build never calls the metadata service; clones get their own URL and token.
    metadata_url: "",
    secrets: {
      machine_id: placeholder(),
      seed: placeholder(),
      db_password: placeholder(),
      encryption_key: placeholder(),
      admin_password: placeholder(),
      metadata_token: "",
    },
    issued_at: ctx.now().getTime(),
    generation: GOLDEN_GENERATION,
  };
}

/**
 * Deletes golden builds of `template` that no box was restored from, keeping the current
 * and the previous build (a create may have read the previous pointer a moment ago), and
 * leftovers of crashed builds. Call it only while holding the template's build lock.
 */
export async function pruneGoldenBuilds(
  ctx: QemuContext,
  template: string,
  referenced: Set<string>,
): Promise<string[]> {
  const dir = goldenTemplateDir(ctx.dataDir, template);
  const builds: Array<{ dir: string; builtAt: string }> = [];
  const removed: string[] = [];
  for (const e of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
    if (!e.isDirectory()) continue;
    const m = await readJson<GoldenManifest>(join(dir, e.name, "manifest.json"));
    if (m) builds.push({ dir: join(dir, e.name), builtAt: m.builtAt });
    else {
      // No manifest: a build the agent crashed in (builds of one template are serialised,
      // and this runs right after the only one in flight finished).
      await rm(join(dir, e.name), { recursive: true, force: true });
      removed.push(join(dir, e.name));
    }
  }
  builds.sort((a, b) => b.builtAt.localeCompare(a.builtAt));
  for (const b of builds.slice(2)) {
    if (referenced.has(b.dir)) continue;
    await rm(b.dir, { recursive: true, force: true });
    removed.push(b.dir);
  }
  return removed;
}
