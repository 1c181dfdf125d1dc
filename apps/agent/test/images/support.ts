import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
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
