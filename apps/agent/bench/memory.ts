/**
 * Streamed vs mapped golden RAM on real QEMU (`npm run bench:memory`, as root), one run,
 * side by side: snapshot size, restore → guest ready with its phases (p50 of each, from the
 * agent's and the guest's progress marks: StepReporter.mark), and host memory (RSS and PSS from
 * /proc/PID/smaps_rollup) of 1 and of N idle clones, with their PSS by kind of mapping: the
 * guest's RAM (what clones of one golden can share), TCG's code buffer and QEMU's other
 * anonymous memory (each VMM's own), and files and libraries. A streamed restore copies the
 * whole guest RAM out of the migration stream into the new process; a mapped one maps the
 * golden's RAM file private and loads only device state (src/vmm/qemu/mapped-ram.ts).
 * Beside them, the floor under any QEMU restore here: a QEMU with no devices and nothing to
 * load, started the way the agent starts its VMs (launchQemu: spawn → QMP answers), and the
 * binary's own start-up (`--version`: loading and linking it, nothing else).
 * Env: BENCH_RUNS (default 5) restores per mode, BENCH_CLONES (default 8), BENCH_IDLE_MS (3000).
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as delay } from "node:timers/promises";
import type { QemuExecutor } from "../src/vmm/qemu/executor.ts";
import { boxPaths } from "../src/vmm/qemu/layout.ts";
import { killVm, launchQemu, readPid } from "../src/vmm/qemu/process.ts";
import type { GoldenManifest } from "../src/vmm/qemu/records.ts";
import { boxSpec, buildMinimalImage, RecordingReporter } from "../test/qemu/support.ts";
import { QemuBench, requireQemuBench, restorePhases } from "./qemu-bench.ts";
import { KINDS, type Kind, pssByKind } from "./vmm-memory.ts";

const RUNS = Number(process.env.BENCH_RUNS ?? 5);
const CLONES = Number(process.env.BENCH_CLONES ?? 8);
const IDLE_MS = Number(process.env.BENCH_IDLE_MS ?? 3000);
const MODES = ["streamed", "mapped"] as const;
const GUEST_MB = 256;
type Mode = (typeof MODES)[number];

requireQemuBench("bench:memory");
buildMinimalImage("bench-memory");
const bench = new QemuBench("dbxr");
const made = Object.fromEntries(
  MODES.map((mode) => [mode, bench.executor({ goldenMemory: mode })]),
) as Record<Mode, ReturnType<QemuBench["executor"]>>;
const executors = Object.fromEntries(MODES.map((mode) => [mode, made[mode].ex])) as Record<
  Mode,
  QemuExecutor
>;
const dirs = Object.fromEntries(MODES.map((mode) => [mode, made[mode].dataDir])) as Record<Mode, string>;

function manifest(mode: Mode): GoldenManifest {
  const pointer = JSON.parse(readFileSync(join(dirs[mode], "golden", "minimal", "current.json"), "utf8"));
  return JSON.parse(readFileSync(pointer.manifest, "utf8"));
}

/** One clone; returns its slug, restore → guest ready and that time's phases (restorePhases). */
async function clone(mode: Mode): Promise<{ slug: string; ms: number; phases: Map<string, number> }> {
  const { slug, ip } = bench.nextBox(`mem-${mode[0]}`);
  const report = new RecordingReporter();
  await executors[mode].createFromGolden(boxSpec(slug, ip), report);
  return { slug, ...restorePhases(report) };
}

type Usage = { rss: number; pss: number; kinds: Map<Kind, number> };

/** RSS and PSS (kB) of the clones' QEMU processes, summed, and their PSS by kind. */
async function memory(mode: Mode, slugs: string[]): Promise<Usage> {
  let rss = 0;
  let pss = 0;
  const kinds = new Map<Kind, number>(KINDS.map((k) => [k, 0]));
  for (const slug of slugs) {
    const pid = await readPid(boxPaths(dirs[mode], slug).pid);
    if (pid === null) throw new Error(`${slug}: no VMM pid`);
    const text = readFileSync(`/proc/${pid}/smaps_rollup`, "utf8");
    rss += Number(/^Rss:\s+(\d+)/m.exec(text)?.[1] ?? 0);
    pss += Number(/^Pss:\s+(\d+)/m.exec(text)?.[1] ?? 0);
    for (const [kind, kb] of pssByKind(pid, GUEST_MB)) kinds.set(kind, kinds.get(kind)! + kb);
  }
  return { rss, pss, kinds };
}

/**
 * The QEMU process alone, RUNS times each: `--version` (exec, dynamic linking of its
 * libraries, constructors) and a bare microvm (`-S`, no devices, no kernel) from spawn until
 * its QMP answers, through the agent's own launchQemu; each killed by its pid at once.
 */
async function qemuStartFloor(): Promise<{ version: number[]; bare: number[] }> {
  const dir = mkdtempSync(join(tmpdir(), "dbxr-bare-"));
  const out = { version: [] as number[], bare: [] as number[] };
  try {
    for (let i = 0; i < RUNS; i++) {
      let t = performance.now();
      execFileSync("qemu-system-x86_64", ["--version"]);
      out.version.push(performance.now() - t);
      const [qmpSocket, pidFile] = [join(dir, "qmp.sock"), join(dir, "pid")];
      t = performance.now();
      const { pid, qmp } = await launchQemu({
        qemuBinary: "qemu-system-x86_64",
        // (The QMP socket's path names `dir`: killVm's check that the pid is still this VM.)
        args: [
          ...["-M", "microvm,acpi=on", "-accel", "tcg", "-m", String(GUEST_MB), "-nodefaults"],
          ...["-no-user-config", "-display", "none", "-S", "-pidfile", pidFile],
          ...["-qmp", `unix:${qmpSocket},server=on,wait=off`],
        ],
        logFile: join(dir, "qemu.log"),
        pidFile,
        qmpSocket,
        netns: null,
      });
      out.bare.push(performance.now() - t);
      qmp.close();
      await killVm(pid, dir, qmpSocket);
    }
    return out;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function removeAll(mode: Mode): Promise<void> {
  for (const { slug } of await executors[mode].list())
    await executors[mode].remove(slug, new RecordingReporter());
}

const p50 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]!;
const p95 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.ceil(xs.length * 0.95) - 1]!;
const mb = (kb: number) => `${(kb / 1024).toFixed(1)} MB`;

try {
  await bench.net.ensureBridge();
  const template = {
    name: "minimal",
    version: "1",
    imageVersion: "bench-memory",
    readyPorts: [8000, 8888],
    memoryMb: GUEST_MB,
    vcpu: 1,
  };
  const build: Record<string, number> = {};
  for (const mode of MODES) {
    const t = performance.now();
    await executors[mode].buildGolden(template, new RecordingReporter());
    build[mode] = performance.now() - t;
  }
  const floor = await qemuStartFloor();
  // Interleaved, so load drift on the host hits both modes alike.
  const ready: Record<Mode, number[]> = { streamed: [], mapped: [] };
  const phases: Record<Mode, Map<string, number[]>> = { streamed: new Map(), mapped: new Map() };
  for (let i = 0; i < RUNS; i++) {
    for (const mode of MODES) {
      const c = await clone(mode);
      ready[mode].push(c.ms);
      for (const [name, ms] of c.phases) phases[mode].set(name, [...(phases[mode].get(name) ?? []), ms]);
      await executors[mode].remove(c.slug, new RecordingReporter());
    }
  }
  const usage = new Map<Mode, { one: Usage; many: Usage }>();
  for (const mode of MODES) {
    const first = await clone(mode);
    await delay(IDLE_MS);
    const one = await memory(mode, [first.slug]);
    const slugs = [first.slug];
    for (let i = 1; i < CLONES; i++) slugs.push((await clone(mode)).slug);
    await delay(IDLE_MS);
    const many = await memory(mode, slugs);
    usage.set(mode, { one, many });
    await removeAll(mode);
  }

  const mem = { streamed: usage.get("streamed")!, mapped: usage.get("mapped")! };
  const qemu = execFileSync("qemu-system-x86_64", ["--version"], { encoding: "utf8" }).split("\n")[0];
  console.log(
    `bench:memory — ${qemu}, microvm (TCG), minimal template (${GUEST_MB} MB guest), one run; the host is shared with other workers, so absolute times are load-dependent`,
  );
  console.log(`                               streamed          mapped`);
  const row = (label: string, s: string, m: string) => console.log(`${label.padEnd(31)}${s.padEnd(18)}${m}`);
  const size = (mode: Mode) => {
    const m = manifest(mode);
    return statSync(m.vmstate).size / 1024 ** 2;
  };
  row("golden build", `${(build.streamed! / 1000).toFixed(2)} s`, `${(build.mapped! / 1000).toFixed(2)} s`);
  row("migration stream (vmstate)", `${size("streamed").toFixed(2)} MB`, `${size("mapped").toFixed(2)} MB`);
  row(
    `restore -> ready p50 (n=${RUNS})`,
    `${p50(ready.streamed).toFixed(0)} ms`,
    `${p50(ready.mapped).toFixed(0)} ms`,
  );
  row(`restore -> ready p95`, `${p95(ready.streamed).toFixed(0)} ms`, `${p95(ready.mapped).toFixed(0)} ms`);
  // One line per mode: side by side, the two lists ran together into one.
  for (const mode of MODES)
    console.log(`  all runs, ${mode} (ms)`.padEnd(31) + ready[mode].map((ms) => ms.toFixed(0)).join(", "));
  // Each phase ends at its mark (launch.ts, ready.ts; the guest's in images/minimal/rootfs).
  console.log("  restore -> ready phases, p50 (ms), each ending at:");
  const names = [...new Set(MODES.flatMap((mode) => [...phases[mode].keys()]))];
  for (const name of names) {
    const cell = (mode: Mode) => {
      const xs = phases[mode].get(name);
      return xs ? `${p50(xs).toFixed(0)} ms` : "-";
    };
    row(`    ${name}`, cell("streamed"), cell("mapped"));
  }
  console.log(
    `  floor, QEMU alone p50 (n=${RUNS}): \`--version\` ${p50(floor.version).toFixed(0)} ms, bare microvm spawn → QMP up ${p50(floor.bare).toFixed(0)} ms (qemu_up above: the same with the box's devices)`,
  );
  row("1 idle clone RSS", mb(mem.streamed.one.rss), mb(mem.mapped.one.rss));
  row("1 idle clone PSS", mb(mem.streamed.one.pss), mb(mem.mapped.one.pss));
  row(`${CLONES} idle clones RSS (sum)`, mb(mem.streamed.many.rss), mb(mem.mapped.many.rss));
  row(`${CLONES} idle clones PSS (sum)`, mb(mem.streamed.many.pss), mb(mem.mapped.many.pss));
  for (const kind of KINDS)
    for (const n of ["one", "many"] as const)
      row(
        `  ${kind}, ${n === "one" ? 1 : CLONES}`,
        mb(mem.streamed[n].kinds.get(kind)!),
        mb(mem.mapped[n].kinds.get(kind)!),
      );
  row(
    `PSS ${CLONES} / PSS 1`,
    `${(mem.streamed.many.pss / mem.streamed.one.pss).toFixed(2)}x`,
    `${(mem.mapped.many.pss / mem.mapped.one.pss).toFixed(2)}x`,
  );
  const guestRatio = (mode: Mode) =>
    `${(mem[mode].many.kinds.get("guest RAM")! / mem[mode].one.kinds.get("guest RAM")!).toFixed(2)}x`;
  row(`guest RAM PSS ${CLONES} / 1`, guestRatio("streamed"), guestRatio("mapped"));
  console.log(
    `streamed / mapped: restore -> ready p50 ${(p50(ready.streamed) / p50(ready.mapped)).toFixed(2)}x, ${CLONES}-clone PSS ${(mem.streamed.many.pss / mem.mapped.many.pss).toFixed(2)}x`,
  );
} finally {
  await bench.cleanup(MODES.map((mode) => executors[mode]));
}
