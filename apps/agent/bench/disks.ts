/**
 * The prepare_disks step alone, old way beside new way, interleaved in one run
 * (`npm run bench:disks`): `qemu-img create` overlay + `mkfs.ext4` volume
 * (two spawns) against a copy of the golden's empty overlay + a volume renamed out of the
 * pre-formatted pool (pool/volumes.ts). Env: BENCH_RUNS (default 10), BENCH_DISK_GB (10).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { VolumePool } from "../src/pool/volumes.ts";
import { createOverlay, createVolume, prepareDisks } from "../src/vmm/qemu/disks.ts";
import { buildMinimalImage, IMAGES_DIR } from "../test/qemu/support.ts";

const RUNS = Number(process.env.BENCH_RUNS ?? 10);
const GB = Number(process.env.BENCH_DISK_GB ?? 10);
buildMinimalImage("bench-disks");
const backing = join(IMAGES_DIR, "minimal", "bench-disks", "rootfs.qcow2");
const dir = mkdtempSync(join(tmpdir(), "dbxd-"));
const template = join(dir, "overlay-template.qcow2");
const pool = new VolumePool({ dir: join(dir, "pool"), perSize: 2, format: createVolume });
try {
  await createOverlay(backing, template);
  await pool.start([GB]);
  await pool.idle();
  const old: number[] = [];
  const fresh: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    for (const [out, overlayTemplate, volumes] of [
      [old, null, null],
      [fresh, template, pool],
    ] as const) {
      const box = join(dir, `box-${i}-${out === old ? "old" : "new"}`);
      const t = performance.now();
      await prepareDisks({
        dir: box,
        overlay: join(box, "overlay.qcow2"),
        volume: join(box, "volume.raw"),
        backing,
        overlayTemplate,
        diskGb: GB,
        volumes,
      });
      out.push(performance.now() - t);
      // The refill runs between creates, as it does on a host (not inside the timed step).
      await pool.idle();
      rmSync(box, { recursive: true, force: true });
    }
  }
  const p50 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]!;
  const list = (xs: number[]) => xs.map((x) => x.toFixed(0)).join(", ");
  console.log(`bench:disks — prepare_disks for a ${GB} GiB volume, ${RUNS} runs each, interleaved`);
  console.log(`  qemu-img + mkfs.ext4:            p50 ${p50(old).toFixed(1)} ms  [${list(old)}]`);
  console.log(`  overlay copy + pooled volume:    p50 ${p50(fresh).toFixed(1)} ms  [${list(fresh)}]`);
  console.log(`  ratio: ${(p50(old) / p50(fresh)).toFixed(1)}x`);
} finally {
  await pool.close();
  rmSync(dir, { recursive: true, force: true });
}
