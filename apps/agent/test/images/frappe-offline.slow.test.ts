// SLOW (a few minutes): runs the real frappe recipe. Everything before its PyPI/GitHub
// steps is built (Debian packages with MariaDB and Redis, Node + yarn, code-server and the
// extension, services); then it must stop with a clear error. The PyPI and GitHub URLs
// point at a closed loopback port, so the check fails the same way on any host and sends
// nothing outside this machine.
import { createServer } from "node:net";
import pino from "pino";
import { describe, expect, it } from "vitest";
import { buildImage } from "../../src/images/builder.ts";
import { ImageError } from "../../src/images/errors.ts";
import { ImageStore } from "../../src/images/store.ts";
import { findTemplate } from "../../src/images/templates.ts";
import { RecordingReporter } from "../qemu/support.ts";
import { BUILD_CACHE_DIR, IMAGE_STORE_DIR, imageBuildUnavailable, REPO } from "./support.ts";

const missing = imageBuildUnavailable();
if (missing) console.warn(`SKIPPING frappe recipe test: ${missing} (CI must provide it)`);

async function closedPort(): Promise<number> {
  return new Promise((resolve) => {
    const srv = createServer().listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      srv.close(() => resolve(typeof addr === "object" && addr ? addr.port : 9));
    });
  });
}

describe.skipIf(missing !== null)("frappe recipe without PyPI/GitHub (slow)", () => {
  it("builds up to its network step, then fails fast with a clear message and stores nothing", async () => {
    const store = new ImageStore(IMAGE_STORE_DIR);
    const before = await store.list("frappe");
    const port = await closedPort();
    const report = new RecordingReporter();
    const lines: string[] = [];
    report.log = (l?: string) => void lines.push(l ?? "");
    const t0 = performance.now();
    const err = await buildImage(findTemplate("frappe")!, report, {
      repoDir: REPO,
      store,
      log: pino({ level: "silent" }),
      env: {
        DOPPIO_IMAGE_CACHE: BUILD_CACHE_DIR,
        FRAPPE_PYPI_INDEX: `http://127.0.0.1:${port}/simple`,
        FRAPPE_GIT_URL: `http://127.0.0.1:${port}/frappe/frappe`,
      },
    }).catch((e: unknown) => e);
    console.log("frappe recipe up to the network step (ms):", Math.round(performance.now() - t0));
    if (!(err instanceof ImageError) || err.code !== "network_unreachable")
      console.error(lines.slice(-40).join("\n"));
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
  }, 900_000);
});
