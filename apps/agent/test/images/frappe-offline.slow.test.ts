// SLOW (a few minutes): runs the real frappe recipe. Everything before its PyPI/GitHub
// steps is built (Debian packages with MariaDB and Redis, the branch's Node + npm + yarn from
// the npm registry, code-server and the extension, services); then it must stop with a clear
// error. The PyPI and GitHub URLs point at a closed loopback port, so the check fails the same
// way on any host and sends nothing outside this machine. The failed build's rootfs is kept
// (DOPPIO_KEEP_FAILED_ROOTFS) so the toolchain it carries is checked by running it in a
// chroot; the version-15 Node step then runs on that same rootfs (one Debian build, not two).
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { findTemplate } from "@doppio/contracts";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort } from "../../../api/test/support/ports.ts";
import { buildImage } from "../../src/images/builder.ts";
import { ImageError } from "../../src/images/errors.ts";
import { ImageStore, type ImageVersion } from "../../src/images/store.ts";
import { RecordingReporter } from "../qemu/support.ts";
import {
  BUILD_CACHE_DIR,
  IMAGE_STORE_DIR,
  imageBuildUnavailable,
  REPO,
  removeUnlessMounted,
} from "./support.ts";

const missing = imageBuildUnavailable();
if (missing) console.warn(`SKIPPING frappe recipe test: ${missing} (CI must provide it)`);

const versions = JSON.parse(readFileSync(join(REPO, "images", "frappe", "versions.json"), "utf8"));
/** On the image store's filesystem, so keeping the rootfs is a rename. */
const KEPT_ROOTFS = join(REPO, ".data", "frappe-offline-rootfs");

/**
 * Runs a command in the kept rootfs the way a box's shell finds it (no host PATH), with /dev
 * and /proc bound and released by the recipes' own chroot_run.
 */
function inImage(...cmd: string[]): string {
  const script = '. "$0/images/common/chroot.sh"; chroot_run "$@"';
  const argv = [KEPT_ROOTFS, "/usr/bin/env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/root", ...cmd];
  return execFileSync("bash", ["-c", script, REPO, ...argv], {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "pipe"],
  }).trim();
}

describe.skipIf(missing !== null)("frappe recipe without PyPI/GitHub (slow)", () => {
  const store = new ImageStore(IMAGE_STORE_DIR);
  const lines: string[] = [];
  let before: ImageVersion[];
  let err: unknown;

  beforeAll(async () => {
    removeUnlessMounted(KEPT_ROOTFS);
    before = await store.list("frappe");
    const port = await freePort();
    const report = new RecordingReporter();
    report.log = (l?: string) => void lines.push(l ?? "");
    const t0 = performance.now();
    err = await buildImage(findTemplate("frappe")!, report, {
      repoDir: REPO,
      store,
      log: pino({ level: "silent" }),
      env: {
        DOPPIO_IMAGE_CACHE: BUILD_CACHE_DIR,
        DOPPIO_KEEP_FAILED_ROOTFS: KEPT_ROOTFS,
        FRAPPE_BRANCH: "version-16",
        FRAPPE_PYPI_INDEX: `http://127.0.0.1:${port}/simple`,
        FRAPPE_GIT_URL: `http://127.0.0.1:${port}/frappe/frappe`,
      },
    }).catch((e: unknown) => e);
    console.log("frappe recipe up to the network step (ms):", Math.round(performance.now() - t0));
    if (!(err instanceof ImageError) || err.code !== "network_unreachable")
      console.error(lines.slice(-40).join("\n"));
  }, 900_000);

  afterAll(() => removeUnlessMounted(KEPT_ROOTFS));

  it("builds up to its network step, then fails fast with a clear message and stores nothing", async () => {
    expect(err).toBeInstanceOf(ImageError);
    expect((err as ImageError).code).toBe("network_unreachable");
    expect((err as ImageError).message).toBe(
      "frappe template needs PyPI and GitHub; this host cannot reach them",
    );
    // Everything before the network step ran; nothing after it did.
    const steps = lines.filter((l) => l.startsWith("STEP "));
    expect(steps).toEqual([
      "STEP kernel",
      "STEP build_rootfs",
      "STEP customize",
      "STEP node_yarn_code_server",
      "STEP services",
      "STEP network",
    ]);
    expect(lines.some((l) => l.includes("was successfully installed"))).toBe(true);
    expect(await store.list("frappe")).toEqual(before);
  });

  it("prints the resolved toolchain before its first download", () => {
    const v16 = versions.branches["version-16"];
    const kernel = lines.indexOf("STEP kernel");
    const preflight = lines.slice(0, kernel);
    expect(preflight).toContain(
      `frappe toolchain version-16: python ${v16.python.install} via uv, must satisfy >=${v16.python.min},<${v16.python.below} (checked after install)`,
    );
    expect(
      preflight.some((l) => l.startsWith(`frappe toolchain version-16: node ${v16.node.version} from npm`)),
    ).toBe(true);
    expect(preflight.some((l) => l.startsWith("frappe toolchain version-16: mariadb >= 10.6"))).toBe(true);
  });

  it("carries version-16's Node from npm, with npm and yarn running on it", () => {
    expect(inImage("node", "-v")).toBe(`v${versions.branches["version-16"].node.version}`);
    expect(inImage("npm", "-v")).toBe(versions.npm.version);
    expect(inImage("yarn", "--version")).toBe(versions.yarn.version);
    // yarn really executes JavaScript on that Node (not just prints a constant).
    expect(inImage("yarn", "node", "-p", "process.version")).toContain(
      `v${versions.branches["version-16"].node.version}`,
    );
  });

  it("runs code-server on the Node its native modules were built for, not on the branch's", () => {
    const launcher = readFileSync(join(KEPT_ROOTFS, "usr/local/bin/code-server"), "utf8");
    const node = launcher.match(/^exec (\S+) /m)?.[1];
    expect(node).toBe("/usr/local/lib/code-server/bin/node");
    expect(inImage(node!, "-v")).toBe(`v${versions.codeServer.node.version}`);
    expect(inImage("code-server", "--version")).toContain(versions.codeServer.version);
  });

  it("gives version-15 its own Node: the recipe's Node step for version-15 on the same rootfs", () => {
    const script = `set -euo pipefail
repo=$1; cache=$2
. "$repo/images/common/chroot.sh"; . "$repo/images/common/code-server.sh"; . "$repo/images/frappe/recipe.sh"
install_node_toolchain "$3"`;
    const out = execFileSync("bash", ["-c", script, "step", REPO, BUILD_CACHE_DIR, KEPT_ROOTFS], {
      encoding: "utf8",
      env: { ...process.env, FRAPPE_BRANCH: "version-15" },
    });
    const v15 = versions.branches["version-15"].node.version;
    expect(out).toContain(
      `image toolchain: node ${v15}, npm ${versions.npm.version}, yarn ${versions.yarn.version}`,
    );
    expect(inImage("node", "-v")).toBe(`v${v15}`);
    expect(inImage("yarn", "node", "-p", "process.version")).toContain(`v${v15}`);
  });
});
