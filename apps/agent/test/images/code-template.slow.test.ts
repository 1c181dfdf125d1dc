// SLOW (several minutes on a cold cache): builds the `code` template with mmdebstrap and
// code-server from npm, golden-builds it under QEMU and restores boxes from it. The built
// image is cached in .data/template-images by its inputs hash, so later runs reuse it.
// The boxes are wired to a real control plane, agent metadata service, GitHub stand-in and
// Git server (apps/api/test/support/box-git.ts): code-b clones, commits and pushes from
// code-server's terminal in Chromium, and its heartbeat reaches the agent.
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { findTemplate } from "@doppio/contracts";
import pino from "pino";
import { type Browser, chromium, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type BoxGitStack, boxGitMissing, startBoxGitStack } from "../../../api/test/support/box-git.ts";
import { freePort } from "../../../api/test/support/ports.ts";
import { buildImage } from "../../src/images/builder.ts";
import { ImageStore } from "../../src/images/store.ts";
import { splitSerialLines } from "../../src/logs/serial-lines.ts";
import type { Upstream, VmSpec } from "../../src/vmm/executor.ts";
import { QemuExecutor } from "../../src/vmm/qemu/executor.ts";
import { boxPaths, goldenTemplateDir } from "../../src/vmm/qemu/layout.ts";
import { boxSpec, GOLDEN_NET, qemuUnavailable, RecordingReporter } from "../qemu/support.ts";
import { waitForBox } from "../support/agent-harness.ts";
import { TestCaddy } from "../support/caddy.ts";
import { BUILD_CACHE_DIR, IMAGE_STORE_DIR, imageBuildUnavailable, REPO } from "./support.ts";

const missing =
  imageBuildUnavailable() ?? qemuUnavailable() ?? (boxGitMissing.length ? boxGitMissing.join(", ") : null);
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
  /** code-b's VS Code, driven by the explorer and the terminal tests. */
  const codeB = workbench(() => `http://${boxes[1]!.up(8888)}/?folder=/workspace`, timings);
  /** Control plane, agent (metadata service), GitHub stand-in serving Git: what the guests talk to. */
  let stack: BoxGitStack;
  /** The agent's name for code-b (its metadata token is the one that agent issued "pusher"). */
  const PUSHER = "pusher";
  /** GitHub's web URL as the guests reach the stand-in: a guest forward on their gateway. */
  let guestGitHub = "";

  beforeAll(async () => {
    let t0 = performance.now();
    stack = await startBoxGitStack({ serverName: "code-host", repos: ["app-a", "app-b"] });
    // A box the control plane created from octo/app-a on the stack's agent (whose VMM is a
    // recording fake): its boot metadata carries the token the agent's metadata service
    // knows. code-b below boots the code template under QEMU with that identity.
    const created = await stack.cp.admin.post("/api/v1/boxes", {
      template: "minimal",
      name: PUSHER,
      repo: "octo/app-a",
    });
    expect(created.status).toBe(202);
    await waitForBox(stack.cp, PUSHER, "running");
    const metadataPort = Number(new URL(stack.agent.agent.metadata.url!).port);
    const gitPort = Number(new URL(stack.gh.webUrl).port);
    // The control plane's GitHub URL is the stand-in on the host's loopback; a user-mode
    // guest reaches that server at its gateway (the forward below) and nothing else.
    expect(stack.fake.metadata.get(PUSHER)!.github_url).toBe(stack.gh.webUrl);
    timings.gitStackMs = Math.round(performance.now() - t0);

    const report = new RecordingReporter();
    const lines: string[] = [];
    report.log = (l?: string) => void lines.push(l ?? "");
    t0 = performance.now();
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
      userModeMetadataPort: metadataPort,
      // Test only: the GitHub stand-in (and its Git) at <gateway>:<its port>.
      userModeGuestForwards: [gitPort],
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
      guestGitHub = `http://${spec.net.gateway}:${gitPort}`;
      spec.metadata.github_url = guestGitHub;
      spec.metadata.metadata_url = `http://${spec.net.gateway}:${metadataPort}`;
      // Both are "created from a repository": each guest tries the clone after READY. code-a's
      // metadata token is its own random one, which the agent never issued.
      spec.metadata.repo = slug === "code-a" ? "octo/app-b" : "octo/app-a";
      if (slug === "code-b") {
        // Nothing has used it yet (this agent has no edge: only guests' heartbeats mark boxes).
        expect(stack.agent.agent.activity.lastActiveAt(PUSHER)).toBeNull();
        const pusher = stack.fake.metadata.get(PUSHER)!;
        expect(pusher.metadata_url).toBe(spec.metadata.metadata_url);
        spec.metadata.secrets.metadata_token = pusher.secrets.metadata_token;
        // The commit author the control plane put in the box's job (octo's login and email).
        expect(pusher.git_author?.name).toBe("octo");
        spec.metadata.git_author = pusher.git_author;
      }
      t0 = performance.now();
      const up = await ex.createFromGolden(spec, new RecordingReporter());
      timings[`create_${slug}_ms`] = Math.round(performance.now() - t0);
      boxes.push({ spec, up });
    }
  }, 1_500_000);

  afterAll(async () => {
    console.log("code template measurements:", JSON.stringify(timings));
    await codeB.close();
    await caddy?.dispose();
    if (ex) {
      for (const { slug } of await ex.list())
        await ex.remove(slug, new RecordingReporter()).catch(() => undefined);
    }
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
    await stack?.close();
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
        `url=${spec.metadata.metadata_url}\ntoken=${s.metadata_token}\ngithub=${guestGitHub}\n`,
      );
      // /etc/gitconfig includes it: the credential helper for the box's GitHub URL only, and
      // the commit author when the metadata names one (code-b's, from the control plane).
      const author = spec.metadata.git_author;
      expect(await read("/run/doppio/gitconfig")).toBe(
        `[credential "${guestGitHub}"]\n\thelper = /usr/local/bin/git-credential-doppio\n${
          author ? `[user]\n\tname = "${author.name}"\n\temail = ${author.email}\n` : ""
        }`,
      );
      seen.push(secrets);
    }
    expect(seen[0]).not.toBe(seen[1]);
  });

  it.skipIf(!existsSync(CHROMIUM))(
    "puts a file created in code-server's explorer on the box's data volume",
    async () => {
      const { spec } = boxes[1]!;
      const name = `created-in-${spec.slug}-${Date.now()}.txt`;
      await createFileInCodeServer(await codeB.page(), name);
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

  it("clones the box's repository after READY through the real credential path; without a credential it says so and the box stays up", async () => {
    const [a, b] = boxes;
    const consoleOf = async (box: (typeof boxes)[number], until: string) => {
      const serial = boxPaths(dataDir, box.spec.slug).serial;
      let text = "";
      for (let i = 0; i < 240 && !text.includes(until); i++) {
        text = readFileSync(serial, "utf8");
        if (!text.includes(until)) await new Promise((r) => setTimeout(r, 500));
      }
      return text.slice(text.indexOf("DOPPIO-READY 1"));
    };
    // code-b: git in the guest → git-credential-doppio → the agent's metadata service → the
    // control plane → the stand-in's installation token → git-http-backend.
    const cloned = await consoleOf(b!, "doppio: clone: cloned");
    expect(cloned).toContain("doppio: clone: cloning octo/app-a into /data/workspace/app-a");
    expect(cloned).toContain("doppio: clone: cloned octo/app-a into /data/workspace/app-a");
    expect(stack.git.requests).toContainEqual({ repo: "octo/app-a", write: false, status: 200 });
    // code-a: its token is not one the agent issued, so no credential, and the clone says why.
    const failed = await consoleOf(a!, "doppio-clone in a terminal");
    expect(failed).toContain("doppio: clone: cloning octo/app-b into /data/workspace/app-b");
    expect(failed).toMatch(
      /doppio: clone: cloning octo\/app-b failed: .*a valid box metadata token is required.*fatal: /,
    );
    expect(failed).toContain("the workspace is left as it was; run doppio-clone in a terminal to try again");
    expect((await fetch(`http://${a!.up(8888)}/healthz`)).status).toBe(200);
  });

  it.skipIf(!existsSync(CHROMIUM))(
    "pushes a commit from code-server's terminal; the same token cannot push to another repository",
    async () => {
      const { up } = boxes[1]!;
      const read = async (file: string) => {
        const res = await fetch(`http://${up(8888)}/vscode-remote-resource?path=${file}`);
        return res.status === 200 ? res.text() : "";
      };
      const page = await codeB.page();
      const t0 = performance.now();
      await inCodeServerTerminal(
        page,
        read,
        [
          {
            line: [
              "cd /data/workspace/app-a && { echo 'from the terminal' > terminal.txt && git add terminal.txt",
              "git commit -qm 'edit from the terminal'",
              "git push origin HEAD; } > ../push-a.log 2>&1; echo exit=$? >> ../push-a.log",
            ].join(" && "),
            log: "/data/workspace/push-a.log",
          },
          {
            line: `git push ${guestGitHub}/octo/app-b.git HEAD:main > ../push-b.log 2>&1; echo exit=$? >> ../push-b.log`,
            log: "/data/workspace/push-b.log",
          },
        ],
        timings,
      );
      timings.terminalPushMs = Math.round(performance.now() - t0);
      const pushA = await read("/data/workspace/push-a.log");
      expect(pushA).toContain("exit=0");
      // The commit is in the bare repository on the host.
      expect(await stack.git.log("octo/app-a")).toEqual(["edit from the terminal", "seed"]);
      // By the box owner's author from its metadata (the guest's system gitconfig), unasked.
      const author = boxes[1]!.spec.metadata.git_author!;
      expect((await stack.git.log("octo/app-a", "%an <%ae>"))[0]).toBe(`${author.name} <${author.email}>`);
      const pushB = await read("/data/workspace/push-b.log");
      expect(pushB).toMatch(/exit=[1-9]/);
      expect(pushB).toContain("403");
      expect(await stack.git.log("octo/app-b")).toEqual(["seed"]);
      expect(stack.git.requests).toContainEqual({ repo: "octo/app-b", write: true, status: 403 });
    },
    600_000,
  );

  it("the guest's heartbeat reaches the agent's metadata service with the box's bearer and marks it active", async () => {
    // The heartbeat (/usr/lib/doppio/heartbeat) posts once a minute when a terminal was used
    // or the CPU was busy; only code-b's token is one the agent issued (as "pusher").
    const t0 = performance.now();
    const activity = stack.agent.agent.activity;
    for (let i = 0; i < 180 && activity.lastActiveAt(PUSHER) === null; i++) {
      await new Promise((r) => setTimeout(r, 1000));
    }
    timings.heartbeatWaitMs = Math.round(performance.now() - t0);
    expect(activity.lastActiveAt(PUSHER)).not.toBeNull();
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
async function createFileInCodeServer(page: Page, name: string): Promise<void> {
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
}

/**
 * Types lines into a new terminal of the VS Code web client the box's code-server serves, in
 * Debian's Chromium, each awaited through its `log` file (read through code-server) until it
 * holds the line's `exit=` marker. A first `echo` proves the shell takes input; it is typed
 * again until it does (under TCG the terminal starts slowly).
 */
async function inCodeServerTerminal(
  page: Page,
  read: (file: string) => Promise<string>,
  lines: Array<{ line: string; log: string }>,
  timings: Record<string, number | string>,
): Promise<void> {
  const t0 = performance.now();
  const waitFor = async (file: string, tries: number) => {
    for (let i = 0; i < tries; i++) {
      if ((await read(file)).includes("exit=")) return true;
      await new Promise((r) => setTimeout(r, 1000));
    }
    return false;
  };
  // xterm's input is an invisible textarea; its screen is what shows.
  const screen = page.locator(".terminal-wrapper .xterm-screen").first();
  for (let i = 0; !(await screen.isVisible().catch(() => false)); i++) {
    if (i >= 3) throw new Error("code-server's terminal never opened");
    // Terminal: Create New Terminal (not the toggle: under TCG a slow panel would be
    // closed again by the next press).
    await page.keyboard.press("Control+Shift+Backquote");
    await screen.waitFor({ timeout: 90_000 }).catch(() => undefined);
  }
  const ready = `/data/workspace/.terminal-${Date.now()}`;
  for (let i = 0; ; i++) {
    await page.locator(".terminal-wrapper .xterm").first().click();
    await page.keyboard.type(`echo exit=0 > ${ready}`, { delay: 10 });
    await page.keyboard.press("Enter");
    if (await waitFor(ready, 20)) break;
    if (i >= 6) throw new Error("code-server's terminal never ran a command");
  }
  timings.terminalReadyMs = Math.round(performance.now() - t0);
  for (const [i, { line, log }] of lines.entries()) {
    const t1 = performance.now();
    await page.keyboard.type(line, { delay: 10 });
    await page.keyboard.press("Enter");
    if (!(await waitFor(log, 180))) throw new Error(`the terminal never finished: ${line}`);
    timings[`terminalLine${i + 1}Ms`] = Math.round(performance.now() - t1);
  }
}

/**
 * code-server's workbench at `url` in Debian's Chromium, opened once and shared by the tests
 * that drive it (under TCG one load takes a minute or more); closed by `close`.
 */
function workbench(url: () => string, timings: Record<string, number | string>) {
  let opened: Promise<{ browser: Browser; page: Page }> | null = null;
  return {
    page: async () => {
      opened ??= (async () => {
        const t0 = performance.now();
        const browser = await launchChromium();
        const page = await browser.newPage({ viewport: { width: 1280, height: 860 } });
        await page.goto(url(), { waitUntil: "domcontentloaded", timeout: 120_000 });
        await page.waitForSelector(".explorer-folders-view", { timeout: 180_000 });
        timings.workbenchLoadMs = Math.round(performance.now() - t0);
        return { browser, page };
      })();
      return (await opened).page;
    },
    close: async () => {
      await (await opened?.catch(() => null))?.browser.close();
    },
  };
}

function launchChromium() {
  return chromium.launch({
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
