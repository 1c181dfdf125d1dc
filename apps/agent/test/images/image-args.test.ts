import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { REPO } from "../qemu/support.ts";

// Both image scripts take their command line and up-to-date check from
// images/common/image-args.sh; each case runs the real scripts.
const scripts = [
  { script: "scripts/build-image.sh", template: "minimal" },
  { script: "images/common/build-debian.sh", template: "code" },
];
const dir = mkdtempSync(join(tmpdir(), "doppio-image-args-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function run(script: string, args: string[]) {
  const r = spawnSync(join(REPO, script), args, { encoding: "utf8", timeout: 60_000 });
  return { status: r.status, stdout: r.stdout.trim(), stderr: r.stderr.trim() };
}

describe.each(scripts)("$script: the shared command line and up-to-date check", ({ script, template }) => {
  const usage = `usage: ${join(REPO, script)} TEMPLATE OUT_DIR [--size SIZE] [--hash-only]`;

  it("refuses bad command lines with exit 2 before doing anything", () => {
    expect(run(script, [template])).toEqual({ status: 2, stdout: "", stderr: usage });
    expect(run(script, [template, "/nonexistent", "--bogus"])).toEqual({
      status: 2,
      stdout: "",
      stderr: usage,
    });
    expect(run(script, ["Bad_Name", "/nonexistent"])).toMatchObject({
      status: 2,
      stderr: "bad template name: Bad_Name",
    });
    expect(run(script, [template, "/nonexistent", "--size", "12X"])).toMatchObject({
      status: 2,
      stderr: "bad size: 12X",
    });
  });

  it("prints the inputs hash with --hash-only: stable, and it covers the size", () => {
    const a = run(script, [template, "/nonexistent", "--size", "1G", "--hash-only"]);
    expect(a).toMatchObject({ status: 0, stderr: "" });
    expect(a.stdout).toMatch(/^[0-9a-f]{64}$/);
    expect(run(script, [template, "/nonexistent", "--hash-only", "--size", "1G"]).stdout).toBe(a.stdout);
    expect(run(script, [template, "/nonexistent", "--size", "2G", "--hash-only"]).stdout).not.toBe(a.stdout);
  });

  it("keeps an OUT_DIR holding a complete build of the same inputs, and builds nothing", () => {
    const hash = run(script, [template, "/nonexistent", "--size", "1G", "--hash-only"]).stdout;
    const out = mkdtempSync(join(dir, `${template}-`));
    for (const f of ["vmlinuz", "initrd.img", "rootfs.qcow2"]) writeFileSync(join(out, f), "built before");
    writeFileSync(join(out, ".inputs-hash"), `${hash}\n`);
    expect(run(script, [template, out, "--size", "1G"])).toEqual({
      status: 0,
      stdout: `image ${template} up to date in ${out} (${hash})`,
      stderr: "",
    });
    expect(readdirSync(out).sort()).toEqual([".inputs-hash", "initrd.img", "rootfs.qcow2", "vmlinuz"]);
  });
});

describe("scripts/build-image.sh: builds sharing one package cache", () => {
  it("run at once, each gets whole packages: downloads never meet in the cache", async () => {
    const debs = mkdtempSync(join(dir, "debs-"));
    const build = (i: number) =>
      new Promise<{ code: number | null; stderr: string }>((resolve) => {
        const child = spawn(join(REPO, "scripts/build-image.sh"), ["minimal", join(dir, `at-once-${i}`)], {
          env: { ...process.env, DOPPIO_DEB_CACHE: debs },
          stdio: ["ignore", "ignore", "pipe"],
        });
        let stderr = "";
        child.stderr!.on("data", (d: Buffer) => {
          stderr += d.toString();
        });
        child.on("close", (code) => resolve({ code, stderr: stderr.trim() }));
      });
    const results = await Promise.all([1, 2, 3].map(build));
    expect(
      results.map((r) => r.code),
      JSON.stringify(results),
    ).toEqual([0, 0, 0]);
    // The kernel and busybox packages once each, and no download directory left behind.
    const left = readdirSync(debs);
    expect(left.filter((f) => f.endsWith(".deb"))).toHaveLength(2);
    expect(left.filter((f) => !f.endsWith(".deb"))).toEqual([]);
  }, 300_000);
});
