import { spawn } from "node:child_process";
import { access, constants, mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { release } from "node:os";
import { dirname, join } from "node:path";
import { setTimeout as delay } from "node:timers/promises";
import type { Logger } from "pino";
import type { Accel } from "./args.ts";

/** Host TSC frequency in kHz from /proc/cpuinfo (`cpu MHz`), or null when not found. */
export async function hostTscKhz(cpuinfoPath = "/proc/cpuinfo"): Promise<number | null> {
  const text = await readFile(cpuinfoPath, "utf8").catch(() => "");
  return parseTscKhz(text);
}

export function parseTscKhz(cpuinfo: string): number | null {
  const m = /^cpu MHz\s*:\s*([0-9.]+)/m.exec(cpuinfo);
  if (!m) return null;
  const khz = Math.round(Number(m[1]) * 1000);
  return Number.isFinite(khz) && khz > 0 ? khz : null;
}

export interface AccelProbe {
  qemuBinary: string;
  kernel: string;
  initrd: string;
  /** Where the verdict is cached (per host kernel release). */
  cacheFile: string;
  netns: string | null;
  timeoutMs?: number;
  log?: Logger;
}

/**
 * KVM only counts when a guest actually reaches userspace under it: on nested hosts
 * /dev/kvm exists but guests hang after decompression. The probe boots the template's
 * kernel with `doppio.probe` (the initramfs prints DOPPIO-PROBE-OK and powers off).
 */
export async function detectAccel(p: AccelProbe): Promise<Accel> {
  const key = `${release()} ${p.qemuBinary}`;
  const cached = await readFile(p.cacheFile, "utf8")
    .then((t) => JSON.parse(t) as { key: string; accel: Accel })
    .catch(() => null);
  if (cached && cached.key === key && (cached.accel === "kvm" || cached.accel === "tcg")) return cached.accel;

  let accel: Accel = "tcg";
  const kvmOpen = await access("/dev/kvm", constants.R_OK | constants.W_OK).then(
    () => true,
    () => false,
  );
  if (kvmOpen) accel = (await probeKvm(p)) ? "kvm" : "tcg";
  p.log?.info({ accel, kvmDevice: kvmOpen }, "accelerator detected");
  await mkdir(dirname(p.cacheFile), { recursive: true });
  await writeFile(p.cacheFile, JSON.stringify({ key, accel, at: new Date().toISOString() }));
  return accel;
}

async function probeKvm(p: AccelProbe): Promise<boolean> {
  await mkdir(dirname(p.cacheFile), { recursive: true });
  const log = join(dirname(p.cacheFile), `kvm-probe-${process.pid}.log`);
  await rm(log, { force: true });
  const qemu = [
    ...["-M", "microvm,acpi=on", "-accel", "kvm", "-cpu", "host", "-m", "128", "-smp", "1"],
    ...["-nodefaults", "-no-user-config", "-display", "none", "-no-reboot"],
    ...["-kernel", p.kernel, "-initrd", p.initrd, "-append", "console=ttyS0 quiet panic=-1 doppio.probe"],
    ...["-serial", `file:${log}`],
  ];
  const [file, args] = p.netns
    ? ["ip", ["netns", "exec", p.netns, p.qemuBinary, ...qemu]]
    : [p.qemuBinary, qemu];
  const child = spawn(file, args, { stdio: "ignore" });
  let exited = false;
  child.once("exit", () => {
    exited = true;
  });
  child.once("error", () => {
    exited = true;
  });
  const deadline = Date.now() + (p.timeoutMs ?? 8_000);
  let ok = false;
  while (Date.now() < deadline) {
    const out = await readFile(log, "utf8").catch(() => "");
    if (out.includes("DOPPIO-PROBE-OK")) {
      ok = true;
      break;
    }
    if (exited) break;
    await delay(100);
  }
  if (!exited && child.pid) process.kill(child.pid, "SIGKILL");
  await rm(log, { force: true });
  return ok;
}
