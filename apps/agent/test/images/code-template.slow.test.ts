// SLOW (several minutes on a cold cache): builds the `code` template with mmdebstrap and
// code-server from npm, golden-builds it under QEMU and restores boxes from it. The built
// image is cached in .data/template-images by its inputs hash, so later runs reuse it.
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { findTemplate } from "@doppio/contracts";
import pino from "pino";
import { chromium } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildImage } from "../../src/images/builder.ts";
import { ImageStore } from "../../src/images/store.ts";
import { splitSerialLines } from "../../src/logs/serial-lines.ts";
import type { Upstream, VmSpec } from "../../src/vmm/executor.ts";
import { QemuExecutor } from "../../src/vmm/qemu/executor.ts";
import { boxPaths, goldenTemplateDir } from "../../src/vmm/qemu/layout.ts";
import { boxSpec, GOLDEN_NET, qemuUnavailable, RecordingReporter } from "../qemu/support.ts";
import { freePort, TestCaddy } from "../support/caddy.ts";
import { BUILD_CACHE_DIR, IMAGE_STORE_DIR, imageBuildUnavailable, REPO } from "./support.ts";

const missing = imageBuildUnavailable() ?? qemuUnavailable();
if (missing) console.warn(`SKIPPING code template tests: ${missing} (CI must provide them)`);

const t = findTemplate("code")!;
const CHROMIUM = "/usr/bin/chromium";
if (!missing && !existsSync(CHROMIUM))
  console.warn("SKIPPING code-server file test: /usr/bin/chromium missing");

describe.skipIf(missing !== null)("code template: build, golden, boxes (slow)", { timeout: 300_000 }, () => {
  const log = pino({ level: "warn" });
  const store = new ImageStore(IMAGE_STORE_DIR);
  const timings: Record<string, number | string> = {};
  let dataDir: string;
  let ex: QemuExecutor;
  let caddy: TestCaddy | null = null;
  let version: string;
  const boxes: Array<{ spec: VmSpec; up: Upstream }> = [];

  beforeAll(async () => {
    const report = new RecordingReporter();
    const lines: string[] = [];
    report.log = (l?: string) => void lines.push(l ?? "");
    let t0 = performance.now();
    const built = await buildImage(t, report, {
      repoDir: REPO,
      store,
      log,
      env: { DOPPIO_IMAGE_CACHE: BUILD_CACHE_DIR },
    }).catch((err) => {
      console.error(lines.slice(-40).join("\n"));
      throw err;
    });
    version = built.version;
    // The cache keeps one build per template (the current one); older ones are dropped.
    await store.prune("code", new Set());
    timings.imageBuildMs = Math.round(performance.now() - t0);
    timings.imageCached = String(built.cached);
    timings.imageDiskMiB = Math.round(built.diskBytes / 1024 ** 2);
    timings.rootfsUsedMiB = Math.round(
      Number((await store.get("code", version))?.manifest.rootfsUsedKb ?? 0) / 1024,
    );
    expect(report.steps.map((s) => s.name)).toEqual(built.cached ? [] : ["build_rootfs", "write_image"]);

    dataDir = mkdtempSync(join(tmpdir(), "dbx-code-"));
    ex = new QemuExecutor({
      dataDir,
      imagesDir: IMAGE_STORE_DIR,
      network: null,
      goldenNet: GOLDEN_NET,
      accel: "auto",
      accelCacheFile: join(REPO, ".data", "qemu-accel.json"),
      userModePorts: [22, 8888],
      readyTimeoutMs: 240_000,
      log,
    });
    t0 = performance.now();
    const g = await ex.buildGolden(
      {
        name: "code",
        version,
        imageVersion: version,
        readyPorts: t.readyPorts,
        memoryMb: t.memoryMb,
        vcpu: t.vcpu,
      },
      new RecordingReporter(),
    );
    timings.goldenBuildMs = Math.round(performance.now() - t0);
    expect(g.status).toBe("ready");
    await store.markGoldenFresh("code", version);
    expect(await store.goldenStale("code")).toBeNull();

    for (const [slug, ip] of [
      ["code-a", "10.0.0.21"],
      ["code-b", "10.0.0.22"],
    ] as const) {
      const spec = boxSpec(slug, ip, 1, { tap: false, template: "code" });
      // code-b is "created from a repository": its guest tries the clone after READY.
      if (slug === "code-b") spec.metadata.repo = "octo/app-a";
      t0 = performance.now();
      const up = await ex.createFromGolden(spec, new RecordingReporter());
      timings[`create_${slug}_ms`] = Math.round(performance.now() - t0);
      boxes.push({ spec, up });
    }
  }, 1_500_000);

  afterAll(async () => {
    console.log("code template measurements:", JSON.stringify(timings));
    await caddy?.dispose();
    if (ex) {
      for (const { slug } of await ex.list())
        await ex.remove(slug, new RecordingReporter()).catch(() => undefined);
    }
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it("answers /healthz and serves the /workspace folder through Caddy at the code URL", async () => {
    const { spec, up } = boxes[0]!;
    caddy = await TestCaddy.create();
    const port = await freePort();
    const host = new URL(spec.metadata.code_url).host;
    await caddy.start({
      admin: { listen: caddy.adminListen },
      apps: {
        http: {
          servers: {
            edge: {
              listen: [`127.0.0.1:${port}`],
              automatic_https: { disable: true },
              routes: [
                {
                  match: [{ host: [host] }],
                  handle: [{ handler: "reverse_proxy", upstreams: [{ dial: up(8888) }] }],
                },
              ],
            },
          },
        },
      },
    });
    const get = (path: string) => viaEdge(port, host, path);
    const health = await get("/healthz");
    expect(health.status).toBe(200);
    expect(JSON.parse(health.body)).toHaveProperty("status");
    const root = await get("/");
    expect(root.status).toBe(302);
    expect(root.location).toContain("folder=/workspace");
    const page = await get("/?folder=/workspace");
    expect(page.status).toBe(200);
    expect(page.body).toContain("workbench");
  });

  it("has its own machine-id (read through code-server) and SSH host keys in each clone", async () => {
    const ids: string[] = [];
    const keys: string[] = [];
    for (const { spec, up } of boxes) {
      const res = await fetch(`http://${up(8888)}/vscode-remote-resource?path=/etc/machine-id`);
      expect(res.status).toBe(200);
      const id = (await res.text()).trim();
      expect(id).toBe(spec.metadata.secrets.machine_id);
      ids.push(id);
      const [host, port] = up(22)!.split(":");
      const scan = await keyscan(host!, port!);
      expect(scan).toMatch(/ssh-ed25519 AAAA/);
      keys.push(scan);
    }
    expect(ids[0]).not.toBe(ids[1]);
    expect(keys[0]).not.toBe(keys[1]);
  });

  it("gives each clone the secrets and metadata-service token from its own metadata", async () => {
    const seen: string[] = [];
    for (const { spec, up } of boxes) {
      const read = async (file: string) => {
        const res = await fetch(`http://${up(8888)}/vscode-remote-resource?path=${file}`);
        expect(res.status).toBe(200);
        return res.text();
      };
      const s = spec.metadata.secrets;
      const secrets = await read("/run/doppio/secrets");
      expect(secrets).toContain(`DOPPIO_DB_PASSWORD=${s.db_password}\n`);
      expect(secrets).toContain(`DOPPIO_ENCRYPTION_KEY=${s.encryption_key}\n`);
      expect(secrets).toContain(`DOPPIO_ADMIN_PASSWORD=${s.admin_password}\n`);
      // What git-credential-doppio reads: this boot's metadata URL and bearer.
      expect(await read("/run/doppio/metadata")).toBe(
        `url=${spec.metadata.metadata_url}\ntoken=${s.metadata_token}\ngithub=https://github.com\n`,
      );
      seen.push(secrets);
    }
    expect(seen[0]).not.toBe(seen[1]);
  });

  it.skipIf(!existsSync(CHROMIUM))(
    "puts a file created in code-server's explorer on the box's data volume",
    async () => {
      const { spec, up } = boxes[1]!;
      const name = `created-in-${spec.slug}-${Date.now()}.txt`;
      await createFileInCodeServer(`http://${up(8888)}/?folder=/workspace`, name);
      // The volume is a raw ext4 file on the host: read it without the guest's help once the
      // guest's journal commit (every 5 s) has written the new directory entry.
      const volume = boxPaths(dataDir, spec.slug).volume;
      let listing = "";
      for (let i = 0; i < 60 && !listing.includes(name); i++) {
        listing = debugfs(volume, "ls -l /workspace");
        if (!listing.includes(name)) await new Promise((r) => setTimeout(r, 1000));
      }
      expect(listing).toContain(name);
      // The other clone's volume does not have it.
      expect(debugfs(boxPaths(dataDir, boxes[0]!.spec.slug).volume, "ls -l /workspace")).not.toContain(name);
    },
  );

  it("keeps the workspace on the box's own data volume", async () => {
    const { spec, up } = boxes[0]!;
    // The volume is a raw ext4 file on the host: read it without the guest's help.
    const paths = boxPaths(dataDir, spec.slug);
    const ls = execFileSync("debugfs", ["-c", "-R", "ls -l /", paths.volume], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "ignore"],
    });
    expect(ls).toContain("workspace");
    expect((await fetch(`http://${up(8888)}/healthz`)).status).toBe(200);
  });

  it("copies its service logs to the serial console (the agent's live log stream)", async () => {
    const { spec, up } = boxes[0]!;
    // A request code-server logs, after the restore: proves the copy is live, not replayed.
    await fetch(`http://${up(8888)}/vscode-remote-resource?path=/nonexistent-${spec.slug}`);
    const serial = boxPaths(dataDir, spec.slug).serial;
    let text = "";
    for (let i = 0; i < 40 && !text.includes(`/nonexistent-${spec.slug}`); i++) {
      text = readFileSync(serial, "utf8");
      if (!text.includes(`/nonexistent-${spec.slug}`)) await new Promise((r) => setTimeout(r, 250));
    }
    expect(text).toContain("DOPPIO-READY 1");
    // What the agent's log shipper makes of it: the request's line, from code-server.
    const { lines } = splitSerialLines(Buffer.from(text, "utf8"), 0, false);
    const logged = lines.find((l) => l.text.includes(`/nonexistent-${spec.slug}`));
    expect(logged?.source).toBe("code-server");
    // code-server's startup lines belong to the golden build's log (copied to its console
    // before the snapshot), not replayed into every clone's log after the restore.
    const pointer = JSON.parse(
      readFileSync(join(goldenTemplateDir(dataDir, "code"), "current.json"), "utf8"),
    );
    const goldenSerial = readFileSync(join(dirname(pointer.manifest), "serial.log"), "utf8");
    expect(goldenSerial).toMatch(/\[svc code-server\] .*HTTP server listening/);
    expect(text).not.toContain("HTTP server listening");
  });

  it("clones the box's repository after READY; a clone that cannot get a credential says so and the box stays up", async () => {
    // A user-mode guest here reaches neither github.com nor a metadata service: the failure
    // path, in a real guest (github-clone.test.ts clones for real through the credential path).
    const [a, b] = boxes;
    const serial = boxPaths(dataDir, b!.spec.slug).serial;
    let text = "";
    for (let i = 0; i < 240 && !text.includes("doppio-clone in a terminal"); i++) {
      text = readFileSync(serial, "utf8");
      if (!text.includes("doppio-clone in a terminal")) await new Promise((r) => setTimeout(r, 500));
    }
    const after = text.slice(text.indexOf("DOPPIO-READY 1"));
    expect(after).toContain("doppio: clone: cloning octo/app-a into /data/workspace/app-a");
    expect(after).toContain("doppio: clone: cloning octo/app-a failed:");
    expect(after).toMatch(/doppio: clone: cloning octo\/app-a failed: .*fatal: /);
    expect(after).toContain("the workspace is left as it was; run doppio-clone in a terminal to try again");
    expect((await fetch(`http://${b!.up(8888)}/healthz`)).status).toBe(200);
    expect(readFileSync(boxPaths(dataDir, a!.spec.slug).serial, "utf8")).not.toContain("doppio: clone:");
  });

  it("cold-boots a box from the same image (measured beside the golden restore)", async () => {
    // Alone on the host: two TCG guests plus a browser starve code-server's start-up.
    for (const { spec } of boxes) await ex.remove(spec.slug, new RecordingReporter());
    const spec = boxSpec("code-cold", "10.0.0.23", 1, { tap: false, template: "code" });
    spec.memoryMb = t.memoryMb;
    spec.vcpu = t.vcpu;
    const t0 = performance.now();
    const up = await ex.createColdBoot(spec, new RecordingReporter());
    timings.coldBootMs = Math.round(performance.now() - t0);
    expect((await fetch(`http://${up(8888)}/healthz`)).status).toBe(200);
  });
});

/** `debugfs -c` (read-only, no journal replay) on an ext4 image; "" on failure. */
function debugfs(image: string, request: string): string {
  try {
    return execFileSync("debugfs", ["-c", "-R", request, image], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "ignore"],
    });
  } catch {
    return "";
  }
}

/**
 * Drives the VS Code web client served by the box's code-server in Debian's Chromium:
 * Explorer > New File..., name, Enter. The file is created by code-server's remote file
 * system in the guest. Under TCG the workbench takes a while: actions are retried.
 */
async function createFileInCodeServer(url: string, name: string): Promise<void> {
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--no-first-run",
    ],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 860 } });
    await page.goto(url, { waitUntil: "domcontentloaded", timeout: 120_000 });
    await page.waitForSelector(".explorer-folders-view", { timeout: 180_000 });
    const newFile = page.locator('.pane-header [aria-label^="New File"]').first();
    const input = page.locator(".explorer-item-edited input").first();
    for (let i = 0; ; i++) {
      await page.locator('.pane-header:has-text("WORKSPACE")').first().hover();
      await newFile.click({ timeout: 5_000 }).catch(() => newFile.dispatchEvent("click"));
      if (
        await input.waitFor({ timeout: 5_000 }).then(
          () => true,
          () => false,
        )
      )
        break;
      if (i >= 40) throw new Error("code-server's explorer never offered a new-file input");
    }
    await input.fill(name);
    await input.press("Enter");
    // Created: the explorer lists it (code-server answered the remote file system's create).
    await page
      .locator(`.explorer-folders-view .monaco-list-row:has-text("${name}")`)
      .first()
      .waitFor({ timeout: 120_000 });
  } finally {
    await browser.close();
  }
}

/** GET through the edge with an explicit Host header (fetch does not let us set it). */
function viaEdge(
  port: number,
  host: string,
  path: string,
): Promise<{ status: number; location: string; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: "127.0.0.1", port, path, headers: { host } }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => {
        body += c;
      });
      res.on("end", () =>
        resolve({ status: res.statusCode ?? 0, location: res.headers.location ?? "", body }),
      );
    });
    req.once("error", reject);
    req.end();
  });
}

async function keyscan(host: string, port: string): Promise<string> {
  // sshd is respawned with the clone's keys right after the restore; retry briefly.
  for (let i = 0; ; i++) {
    try {
      const out = execFileSync("ssh-keyscan", ["-T", "5", "-t", "ed25519,ecdsa", "-p", port, host], {
        encoding: "utf8",
        stdio: ["ignore", "pipe", "ignore"],
      });
      if (out.includes("ssh-ed25519"))
        return out
          .replace(/^\[[^\]]+\]:\d+ /gm, "")
          .split("\n")
          .sort()
          .join("\n");
    } catch {}
    if (i >= 20) throw new Error(`ssh-keyscan ${host}:${port} found no host key`);
    await new Promise((r) => setTimeout(r, 500));
  }
}
