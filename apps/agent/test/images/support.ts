import { execFileSync } from "node:child_process";
import { existsSync, rmSync } from "node:fs";
import { join } from "node:path";
import { REPO } from "../qemu/support.ts";

export { REPO };
/** Built images are cached here across runs, keyed by their inputs hash (ImageStore.findByHash). */
export const IMAGE_STORE_DIR = join(REPO, ".data", "template-images");
/** code-server staging and the kernel package cache (shared with operator builds). */
export const BUILD_CACHE_DIR = process.env.DOPPIO_IMAGE_CACHE ?? "/var/cache/doppiobox";

/** Why Debian template builds cannot run here, or null. */
export function imageBuildUnavailable(): string | null {
  if (process.getuid?.() !== 0) return "not root (mmdebstrap --mode=root, chroot, mount)";
  for (const [bin, arg] of [
    ["mmdebstrap", "--version"],
    ["mkfs.ext4", "-V"],
    ["qemu-img", "--version"],
    ["apt-get", "--version"],
    ["zip", "-v"],
    ["rg", "--version"],
    ["make", "--version"],
  ] as const) {
    try {
      execFileSync(bin, [arg], { stdio: "ignore" });
    } catch {
      return `${bin} missing (scripts/bootstrap.sh installs it)`;
    }
  }
  if (!existsSync("/usr/include/gssapi/gssapi.h"))
    return "libkrb5-dev missing (scripts/bootstrap.sh installs it)";
  return null;
}

/**
 * Removes a build or rootfs directory, but never through a mount: recipes bind the host's /dev
 * (and mmdebstrap its /dev/shm) into rootfs directories while they run.
 */
export function removeUnlessMounted(dir: string): void {
  const mounts = execFileSync("findmnt", ["-rn", "-o", "TARGET"], { encoding: "utf8" })
    .split("\n")
    .filter((m) => m === dir || m.startsWith(`${dir}/`));
  if (mounts.length > 0) {
    console.error(`NOT removing ${dir}: still mounted: ${mounts.join(", ")}`);
    return;
  }
  rmSync(dir, { recursive: true, force: true });
}
