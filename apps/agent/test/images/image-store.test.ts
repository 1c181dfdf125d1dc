import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { findTemplate, TEMPLATES, type TemplateDescriptor } from "@doppio/contracts";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildImage, HostImageBuilder, REPO_DIR } from "../../src/images/builder.ts";
import { ImageError } from "../../src/images/errors.ts";
import { ImageStore, versionName } from "../../src/images/store.ts";
import { REPO, RecordingReporter } from "../qemu/support.ts";

// A stand-in recipe with the real scripts' interface: STEP lines, OUT_DIR files, the inputs
// hash (from $RECIPE_INPUT), exit 3 for "network unreachable".
const FAKE_RECIPE = `#!/usr/bin/env bash
set -euo pipefail
out=$2
hash=$(printf '%s' "$RECIPE_INPUT" | sha256sum | cut -d' ' -f1)
[ "\${5:-}" = "--hash-only" ] && { echo "$hash"; exit 0; }
echo "STEP build_rootfs"
echo "building $1 size $4"
[ "$RECIPE_INPUT" = offline ] && { echo "frappe template needs PyPI and GitHub; this host cannot reach them" >&2; exit 3; }
[ "$RECIPE_INPUT" = broken ] && { echo "mmdebstrap failed" >&2; exit 1; }
echo "STEP write_image"
mkdir -p "$out"
for f in vmlinuz initrd.img rootfs.qcow2; do head -c 4096 /dev/urandom > "$out/$f"; done
echo "{\\"template\\":\\"$1\\",\\"inputsHash\\":\\"$hash\\",\\"builtAt\\":\\"x\\"}" > "$out/manifest.json"
echo "$hash" > "$out/.inputs-hash"
echo "RUNS" >> "$(dirname "$out")/../runs.log"
`;

describe("image store and buildImage (stand-in recipe)", () => {
  let repo: string;
  let store: ImageStore;
  const t: TemplateDescriptor = { ...findTemplate("code")!, recipe: { kind: "debian", script: "fake.sh" } };
  const log = pino({ level: "silent" });
  let clock = new Date("2026-11-29T10:00:00Z");
  const opts = (input: string) => ({
    repoDir: repo,
    store,
    log,
    now: () => clock,
    env: { RECIPE_INPUT: input },
  });

  beforeAll(() => {
    repo = mkdtempSync(join(tmpdir(), "dbx-img-"));
    writeFileSync(join(repo, "fake.sh"), FAKE_RECIPE);
    chmodSync(join(repo, "fake.sh"), 0o755);
    mkdirSync(join(repo, "images"));
    store = new ImageStore(join(repo, "images"));
  });
  afterAll(() => rmSync(repo, { recursive: true, force: true }));

  it("names versions by build time and inputs so they sort oldest first", () => {
    expect(versionName(new Date("2026-11-29T10:00:05.123Z"), "abcdef0123456789")).toBe(
      "20261129T100005-abcdef012345",
    );
  });

  it("builds into a new version, streams steps and log lines, and marks the golden stale", async () => {
    const report = new RecordingReporter();
    const lines: string[] = [];
    report.log = (l?: string) => void lines.push(l ?? "");
    const r = await buildImage(t, report, opts("one"));
    expect(r).toMatchObject({ template: "code", cached: false, goldenStale: true });
    expect(report.steps.map((s) => [s.name, s.ok])).toEqual([
      ["build_rootfs", true],
      ["write_image", true],
    ]);
    expect(lines).toContain("building code size 3G");
    expect((await store.current("code"))?.version).toBe(r.version);
    expect(await store.goldenStale("code")).toMatchObject({ version: r.version });
    await store.markGoldenFresh("code", r.version);
    expect(await store.goldenStale("code")).toBeNull();
  });

  it("reuses a build of the same inputs without running the recipe or staling the golden", async () => {
    clock = new Date("2026-11-29T11:00:00Z");
    const report = new RecordingReporter();
    const r = await buildImage(t, report, opts("one"));
    expect(r.cached).toBe(true);
    expect(r.goldenStale).toBe(false);
    expect(report.steps).toEqual([]);
    expect((await store.list("code")).length).toBe(1);
  });

  it("keeps older versions (golden disks back onto them) and switches current to the new one", async () => {
    clock = new Date("2026-11-29T12:00:00Z");
    const r = await buildImage(t, new RecordingReporter(), opts("two"));
    const all = await store.list("code");
    expect(all.map((v) => v.version)).toEqual([all[0]!.version, r.version]);
    expect((await store.current("code"))?.version).toBe(r.version);
    expect((await store.goldenStale("code"))?.version).toBe(r.version);
  });

  it("prunes versions that are neither current nor in use", async () => {
    const [old, current] = await store.list("code");
    expect(await store.prune("code", new Set([old!.version]))).toEqual([]);
    expect(await store.prune("code", new Set())).toEqual([old!.version]);
    expect((await store.list("code")).map((v) => v.version)).toEqual([current!.version]);
  });

  it("fails with network_unreachable and the recipe's message, leaving nothing behind", async () => {
    const before = await store.list("code");
    const report = new RecordingReporter();
    const err = await buildImage(t, report, opts("offline")).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ImageError);
    expect((err as ImageError).code).toBe("network_unreachable");
    expect((err as ImageError).message).toBe(
      "frappe template needs PyPI and GitHub; this host cannot reach them",
    );
    expect(report.steps.map((s) => [s.name, s.ok])).toEqual([["build_rootfs", false]]);
    expect(await store.list("code")).toEqual(before);
  });

  it("reports other recipe failures as build_failed with the output tail", async () => {
    const err = await buildImage(t, new RecordingReporter(), opts("broken")).catch((e: unknown) => e);
    expect((err as ImageError).code).toBe("build_failed");
    expect((err as ImageError).message).toContain("mmdebstrap failed");
  });

  it("refuses to replace an existing version directory", async () => {
    const current = (await store.current("code"))!;
    const err = await buildImage(t, new RecordingReporter(), {
      ...opts("three"),
      version: current.version,
    }).catch((e: unknown) => e);
    expect((err as ImageError).code).toBe("version_conflict");
  });

  it("HostImageBuilder rejects templates without a recipe", async () => {
    const b = new HostImageBuilder({ repoDir: repo, store, log });
    const err = await b
      .build(
        { name: "nope", version: "1", imageVersion: "1", readyPorts: [], memoryMb: 1, vcpu: 1 },
        new RecordingReporter(),
      )
      .catch((e: unknown) => e);
    expect((err as ImageError).code).toBe("unknown_template");
  });

  it("finds the recipes from the agent's own checkout", () => {
    expect(REPO_DIR).toBe(REPO);
  });

  it("describes every template as data with a recipe that exists in the repo", () => {
    expect(TEMPLATES.map((x) => x.name)).toEqual(["minimal", "code", "frappe"]);
    for (const x of TEMPLATES) {
      expect(existsSync(join(REPO, x.recipe.script))).toBe(true);
      if (x.recipe.kind === "debian")
        expect(existsSync(join(REPO, "images", x.name, "recipe.sh"))).toBe(true);
      expect(x.readyPorts.length).toBeGreaterThan(0);
      expect(x.defaultSize).toMatch(/^\d+[MG]$/);
    }
  });
});
