import { randomBytes } from "node:crypto";
import { chown, readdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import type { Logger } from "pino";
import { makeDirs } from "../../make-dirs.ts";
import type { BoxMetadata, GoldenInfo, HostNetwork, StepReporter, TemplateSpec } from "../executor.ts";
import { waitSerialQuiet } from "../serial-quiet.ts";
import { CleanupStack } from "./cleanup.ts";
import { cloneDisk, createVolume, freezeShared, linkOrClone } from "./disks.ts";
import { FirecrackerError } from "./errors.ts";
import { goldenJailId, IN_JAIL } from "./layout.ts";
import { claimUid, releaseUid } from "./uid-pool.ts";
import {
  configureAndBoot,
  type LaunchDeps,
  launch,
  mmdsPayload,
  removeJail,
  stopVmm,
  touchLogs,
} from "./vm-launch.ts";

/** Written next to a finished build; clones read memory size and ready ports from it. */
export interface GoldenBuildInfo {
  template: string;
  version: string;
  /** Image-store version the build was requested from (older builds lack it). */
  imageVersion?: string;
  buildId: string;
  builtAt: string;
  memoryMb: number;
  vcpu: number;
  readyPorts: number[];
}

export interface GoldenDeps extends LaunchDeps {
  network: HostNetwork;
  probe: ReadinessProbe;
  log: Logger;
}

export interface ReadinessProbe {
  /**
   * Resolves once every port accepts connections at `ip`, rejects at the deadline, or with
   * `vmm_exited` as soon as `alive` (when given) says the VMM is gone.
   */
  waitForPorts(ip: string, ports: number[], timeoutMs: number, alive?: () => Promise<boolean>): Promise<void>;
}

/** The build a new clone uses; read once per restore so a concurrent rebuild cannot mix files. */
export async function currentGolden(
  deps: GoldenDeps,
  template: string,
): Promise<{ dir: string; info: GoldenBuildInfo } | null> {
  const root = deps.layout.goldenDir(template);
  try {
    const { buildId } = JSON.parse(await readFile(path.join(root, "current.json"), "utf8")) as {
      buildId: string;
    };
    const dir = deps.layout.goldenBuildDir(template, buildId);
    const info = JSON.parse(await readFile(path.join(dir, "info.json"), "utf8")) as GoldenBuildInfo;
    return { dir, info };
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw err;
  }
}

export async function goldenStatus(
  deps: GoldenDeps,
  template: string,
  building: boolean,
): Promise<GoldenInfo> {
  const current = await currentGolden(deps, template);
  const failure = await readFile(path.join(deps.layout.goldenDir(template), "last-error.json"), "utf8")
    .then((t) => JSON.parse(t) as { error: string; version: string })
    .catch(() => null);
  if (building) {
    return {
      template,
      version: current?.info.version ?? "",
      status: "building",
      builtAt: current?.info.builtAt ?? null,
      error: null,
      imageVersion: current?.info.imageVersion ?? null,
    };
  }
  if (current) {
    return {
      template,
      version: current.info.version,
      status: "ready",
      builtAt: current.info.builtAt,
      error: failure?.error ?? null,
      imageVersion: current.info.imageVersion ?? null,
    };
  }
  if (failure) {
    const { version, error } = failure;
    return { template, version, status: "failed", builtAt: null, error, imageVersion: null };
  }
  return { template, version: "", status: "missing", builtAt: null, error: null, imageVersion: null };
}

/**
 * Boots the template image with golden resources (more RAM, reserved address), waits for
 * its services, snapshots it (MMDS already configured, so clones can reach it), and
 * publishes the build by rewriting `current.json`. Older builds are removed afterwards;
 * running clones keep their hard links to the files they restored from.
 */
export async function buildGolden(
  deps: GoldenDeps,
  template: TemplateSpec,
  report: StepReporter,
): Promise<GoldenInfo> {
  const { cfg, layout, clock } = deps;
  const buildId = `${clock.now().toString(36)}-${randomBytes(3).toString("hex")}`;
  const jailId = goldenJailId(template.name, buildId);
  const owner = `golden:${template.name}:${buildId}`;
  const buildDir = layout.goldenBuildDir(template.name, buildId);
  const net = cfg.golden.net;
  const memoryMb = Math.max(cfg.golden.memoryMb, template.memoryMb);
  const cleanup = new CleanupStack();
  const rootDir = layout.goldenDir(template.name);
  try {
    const uid = await claimUid(layout.uidsDir(), owner, cfg.uidBase, cfg.uidCount);
    cleanup.push("release uid", () => releaseUid(layout.uidsDir(), uid, owner));
    cleanup.push("remove build dir", () => rm(buildDir, { recursive: true, force: true }));
    await report.step("prepare_disks", async () => {
      await makeDirs(buildDir);
      // Firecracker's images are not versioned on disk yet: imageVersion is only recorded.
      await cloneDisk(
        path.join(cfg.imagesDir, template.name, "rootfs.ext4"),
        path.join(buildDir, "rootfs.ext4"),
      );
      await createVolume(path.join(buildDir, "volume.ext4"), cfg.golden.volumeGb);
      await touchLogs([path.join(buildDir, "firecracker.log"), path.join(buildDir, "metrics.json")]);
    });
    await report.step("setup_network", () => deps.network.createTap(net.tap, net));
    cleanup.push("remove tap", () => deps.network.removeTap(net.tap));
    cleanup.push("remove jail", () => removeJail(deps, jailId));
    const { pid, client } = await report.step("boot_vm", async () => {
      const launched = await launch(deps, {
        jailId,
        uid,
        gid: uid,
        memoryMb,
        serialLog: path.join(buildDir, "serial.log"),
        writableDirs: [IN_JAIL.snapshotDir],
        files: [
          { host: cfg.kernelPath, inJail: IN_JAIL.kernel, owned: false },
          { host: path.join(buildDir, "rootfs.ext4"), inJail: IN_JAIL.rootfs, owned: true },
          { host: path.join(buildDir, "volume.ext4"), inJail: IN_JAIL.volume, owned: true },
          { host: path.join(buildDir, "firecracker.log"), inJail: IN_JAIL.log, owned: true },
          { host: path.join(buildDir, "metrics.json"), inJail: IN_JAIL.metrics, owned: true },
        ],
      });
      cleanup.push("stop vmm", () => stopVmm(deps, jailId, launched.pid));
      const placeholder: BoxMetadata = {
        slug: `golden-${template.name}`,
        site_url: "",
        code_url: "",
        env: {},
        network: { ip: net.ip, prefix: net.prefix, gateway: net.gateway, mac: net.mac, dns: net.dns },
        // The golden build never calls the metadata service; clones get their own URL and token.
        metadata_url: "",
        secrets: {
          machine_id: randomBytes(16).toString("hex"),
          seed: randomBytes(32).toString("hex"),
          db_password: randomBytes(16).toString("hex"),
          encryption_key: randomBytes(32).toString("base64"),
          admin_password: randomBytes(16).toString("hex"),
          metadata_token: "",
        },
        issued_at: clock.now(),
        generation: 1,
      };
      const dev = { vcpu: template.vcpu, memoryMb, mac: net.mac, tap: net.tap, balloon: true };
      await configureAndBoot(launched.client, cfg, dev, mmdsPayload(placeholder));
      return launched;
    });
    await report.step("wait_ready", () =>
      deps.probe.waitForPorts(net.ip, template.readyPorts, cfg.goldenReadyTimeoutMs),
    );
    await report.step("snapshot_vm", async () => {
      await waitSerialQuiet(path.join(buildDir, "serial.log"));
      await client.patchVm("Paused");
      await client.createSnapshot({
        snapshot_type: "Full",
        snapshot_path: IN_JAIL.vmstate,
        mem_file_path: IN_JAIL.mem,
      });
      // A paused guest cannot react to Ctrl+Alt+Del; its state is saved, so kill it.
      await stopVmm(deps, jailId, pid, false);
      await linkOrClone(layout.inJail(jailId, IN_JAIL.vmstate), path.join(buildDir, "vmstate"));
      await linkOrClone(layout.inJail(jailId, IN_JAIL.mem), path.join(buildDir, "mem"));
      for (const f of ["vmstate", "mem", "rootfs.ext4", "volume.ext4"]) {
        await chown(path.join(buildDir, f), 0, 0);
        await freezeShared(path.join(buildDir, f));
      }
      const info: GoldenBuildInfo = {
        template: template.name,
        version: template.version,
        imageVersion: template.imageVersion,
        buildId,
        builtAt: new Date(clock.now()).toISOString(),
        memoryMb,
        vcpu: template.vcpu,
        readyPorts: template.readyPorts,
      };
      await writeFile(path.join(buildDir, "info.json"), `${JSON.stringify(info, null, 2)}\n`);
      const tmp = path.join(rootDir, `current.json.${buildId}.tmp`);
      await writeFile(tmp, JSON.stringify({ buildId }));
      await rename(tmp, path.join(rootDir, "current.json"));
    });
    // Published: keep the build dir; undo only the transient pieces.
    cleanup.release();
    await removeJail(deps, jailId);
    await deps.network.removeTap(net.tap);
    await releaseUid(layout.uidsDir(), uid, owner);
    await rm(path.join(rootDir, "last-error.json"), { force: true });
    await pruneBuilds(deps, template.name, buildId);
    deps.log.info({ template: template.name, buildId, memoryMb }, "golden snapshot published");
    return goldenStatus(deps, template.name, false);
  } catch (err) {
    const problems = await cleanup.run();
    for (const p of problems)
      deps.log.warn({ err: p, template: template.name }, "golden build cleanup failed");
    await makeDirs(rootDir);
    const message = err instanceof Error ? err.message : String(err);
    await writeFile(
      path.join(rootDir, "last-error.json"),
      JSON.stringify({ error: message, version: template.version }),
    );
    throw err instanceof FirecrackerError
      ? err
      : new FirecrackerError("golden_build_failed", message, { cause: err });
  }
}

async function pruneBuilds(deps: GoldenDeps, template: string, keep: string): Promise<void> {
  const buildsDir = path.join(deps.layout.goldenDir(template), "builds");
  for (const name of await readdir(buildsDir)) {
    if (name !== keep) await rm(path.join(buildsDir, name), { recursive: true, force: true });
  }
}
