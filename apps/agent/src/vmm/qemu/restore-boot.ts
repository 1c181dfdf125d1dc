import { access, open, writeFile } from "node:fs/promises";
import { join } from "node:path";

/**
 * A VM restored from a snapshot never boots: its kernel is already in the RAM it loads. QEMU
 * still wants `-kernel` and `-initrd` (they decide the option ROM that boots a kernel, a RAM
 * block of the migrated state), and it keeps both files' whole contents in its own memory for
 * as long as it runs (fw_cfg's kernel, setup and initrd data, read only by that ROM at boot):
 * 14 MB for Debian's cloud kernel and the minimal initrd, in every box. So each golden build
 * writes stand-ins beside its snapshot, and restores from it (clones, pool clones, resumes of
 * its boxes) pass those: the kernel's boot sector, header and setup code (all QEMU reads to
 * pick the same ROM) and an empty initrd. A guest that reboots makes QEMU exit
 * (`-no-reboot`), and the box's next start cold-boots the real kernel from its record.
 */
export function restoreBootPaths(goldenDir: string): { kernel: string; initrd: string } {
  return { kernel: join(goldenDir, "restore-kernel"), initrd: join(goldenDir, "restore-initrd") };
}

/** Offsets in a bzImage (the Linux x86 boot protocol): setup sectors and the header magic. */
const SETUP_SECTS = 0x1f1;
const HEADER_MAGIC = 0x202;

/**
 * Writes the stand-ins for a golden booted from `kernel` into `goldenDir`; returns false (and
 * writes nothing) when the kernel is not a bzImage, whose restores then pass the real files.
 */
export async function writeRestoreBoot(kernel: string, goldenDir: string): Promise<boolean> {
  const file = await open(kernel, "r");
  try {
    const head = Buffer.alloc(HEADER_MAGIC + 4);
    await file.read(head, 0, head.length, 0);
    if (head.toString("latin1", HEADER_MAGIC, HEADER_MAGIC + 4) !== "HdrS") return false;
    // 0 setup sectors means 4 (the boot protocol's oldest rule); plus the boot sector.
    const setup = Buffer.alloc(((head[SETUP_SECTS] || 4) + 1) * 512);
    const { bytesRead } = await file.read(setup, 0, setup.length, 0);
    if (bytesRead < setup.length) return false;
    const paths = restoreBootPaths(goldenDir);
    await writeFile(paths.kernel, setup);
    await writeFile(paths.initrd, "");
    return true;
  } finally {
    await file.close();
  }
}

/** The stand-ins of the golden build at `goldenDir`, or null when it has none (older builds). */
export async function restoreBoot(goldenDir: string): Promise<{ kernel: string; initrd: string } | null> {
  const paths = restoreBootPaths(goldenDir);
  return access(paths.kernel).then(
    () => paths,
    () => null,
  );
}
