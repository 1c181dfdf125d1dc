import { execFileSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import pino from "pino";
import { macForIp, tapNameForIp } from "../../src/net/naming.ts";
import type { HostNetwork, StepReporter, VmSpec } from "../../src/vmm/executor.ts";
import { QemuExecutor } from "../../src/vmm/qemu/executor.ts";
import { netnsUnavailable } from "../support/netns.ts";

export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../../../..");
/** Images are cached across runs (the build script skips unchanged inputs). */
export const IMAGES_DIR = join(REPO, ".data", "images");
const GATEWAY = "10.0.0.1";
export const GOLDEN_NET = { ip: "10.0.255.254", prefix: 16, gateway: GATEWAY };

/** Why the QEMU tests cannot run here, or null. */
export function qemuUnavailable(): string | null {
  const netns = netnsUnavailable();
  if (netns) return netns;
  for (const [bin, arg] of [
    ["qemu-system-x86_64", "--version"],
    ["qemu-img", "--version"],
    ["mkfs.ext4", "-V"],
    ["apt-get", "--version"],
    ["curl", "--version"],
    ["socat", "-V"],
  ] as const) {
    try {
      execFileSync(bin, [arg], { stdio: "ignore" });
    } catch {
      return `${bin} missing`;
    }
  }
  if (!existsSync("/dev/net/tun")) return "/dev/net/tun missing";
  return null;
}

/** Builds (or reuses) the minimal image: kernel from Debian's apt, busybox rootfs. */
export function buildMinimalImage(version: string, size = "512M", template = "minimal"): string {
  const out = join(IMAGES_DIR, template, version);
  execFileSync(join(REPO, "scripts", "build-image.sh"), ["minimal", out, "--size", size], {
    stdio: ["ignore", "ignore", "inherit"],
    timeout: 180_000,
  });
  return out;
}

export function boxSpec(
  slug: string,
  ip: string,
  generation = 1,
  opts: { tap?: boolean; diskGb?: number; template?: string; probe?: boolean } = {},
): VmSpec {
  const mac = macForIp(ip);
  return {
    slug,
    template: opts.template ?? "minimal",
    vcpu: 1,
    memoryMb: 256,
    diskGb: opts.diskGb ?? 1,
    net: { ip, prefix: 16, gateway: GATEWAY, mac, tap: opts.tap === false ? null : tapNameForIp(ip) },
    metadata: {
      slug,
      site_url: `http://${slug}.site.test`,
      code_url: `http://${slug}.code.test`,
      env: { GREETING: "it's a box", ...(opts.probe ? { DOPPIO_PROBE: "1" } : {}) },
      network: { ip, prefix: 16, gateway: GATEWAY, mac, dns: [GATEWAY] },
      metadata_url: `http://${GATEWAY}:8169`,
      secrets: {
        machine_id: randomUUID().replaceAll("-", ""),
        seed: randomUUID(),
        db_password: randomUUID(),
        encryption_key: randomUUID(),
        admin_password: randomUUID(),
        metadata_token: randomUUID(),
      },
      issued_at: Date.now(),
      generation,
    },
  };
}

/** Records step names and durations; the tests print them as measurements. */
export class RecordingReporter implements StepReporter {
  /** `at`, `end`: performance.now() when the step started and ended. */
  readonly steps: Array<{ name: string; ms: number; ok: boolean; at: number; end: number }> = [];
  /** Points inside steps (StepReporter.mark), in order, at performance.now(). */
  readonly marks: Array<{ event: string; at: number }> = [];
  async step<T>(name: Parameters<StepReporter["step"]>[0], fn: () => Promise<T>): Promise<T> {
    const at = performance.now();
    const done = (ok: boolean) => {
      const end = performance.now();
      this.steps.push({ name, ms: Math.round(end - at), ok, at, end });
    };
    try {
      const out = await fn();
      done(true);
      return out;
    } catch (err) {
      done(false);
      throw err;
    }
  }
  mark(event: string): void {
    this.marks.push({ event, at: performance.now() });
  }
  log(_line: string): void {}
}

/**
 * A QEMU executor for tests and benches, its VMs in `netns`, with the minimal template's
 * golden snapshot built from image `imageVersion` (see buildMinimalImage).
 */
export async function minimalGoldenExecutor(o: {
  dataDir: string;
  network: HostNetwork | null;
  netns: string;
  imageVersion: string;
  userModeMetadataPort?: number;
}): Promise<QemuExecutor> {
  const ex = new QemuExecutor({
    dataDir: o.dataDir,
    imagesDir: IMAGES_DIR,
    network: o.network,
    netns: o.netns,
    goldenNet: GOLDEN_NET,
    accel: "auto",
    // The KVM probe verdict is per host: keep it across runs.
    accelCacheFile: join(REPO, ".data", "qemu-accel.json"),
    userModeMetadataPort: o.userModeMetadataPort ?? null,
    log: pino({ level: "warn" }),
  });
  const template = {
    name: "minimal",
    version: "1",
    imageVersion: o.imageVersion,
    readyPorts: [8000, 8888],
    memoryMb: 256,
    vcpu: 1,
  };
  const info = await ex.buildGolden(template, new RecordingReporter());
  if (info.status !== "ready") throw new Error(`golden build failed: ${info.error ?? info.status}`);
  return ex;
}

/**
 * Removes every box of `ex` (best effort) and closes it, so volume-pool refills still in
 * flight end before the test removes their data dir: the end of a file's QEMU fixture.
 */
export async function removeAllAndClose(ex: QemuExecutor | undefined): Promise<void> {
  if (!ex) return;
  for (const { slug } of await ex.list())
    await ex.remove(slug, new RecordingReporter()).catch(() => undefined);
  await ex.close();
}
