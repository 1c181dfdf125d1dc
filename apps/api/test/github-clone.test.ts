import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { chmod, mkdir, readdir, readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GUEST_LIB } from "../../agent/test/metadata/support.ts";
import { waitForBox } from "../../agent/test/support/agent-harness.ts";
import {
  BOX_CREDENTIAL_HELPER,
  type BoxGitStack,
  boxGitMissing,
  startBoxGitStack,
  writeBoxMetadata,
} from "./support/box-git.ts";
import { connectInstallation } from "./support/github.ts";

const CLONE = path.resolve(import.meta.dirname, "../../../images/common/rootfs/usr/local/bin/doppio-clone");
const missing = boxGitMissing;
if (missing.length) console.warn(`SKIPPING GitHub clone test: missing ${missing.join(", ")}`);

/**
 * Clone on first start: `repo` on create reaches the agent in the create job's payload and
 * the guest in its boot metadata; the guest's `doppio-clone` (run by apply after READY)
 * clones it through git-credential-doppio → the agent's metadata service → the control
 * plane → the GitHub stand-in's installation token → a real git-http-backend. Runs on the
 * host, as github-push.test.ts does: the box's side is the two scripts and the files apply
 * writes from the metadata. The helper and the clone use the GitHub web URL the control
 * plane's GitHub config put in the box's metadata: the stand-in's, which serves Git. The frappe
 * template's path (bench get-app + install-app) runs against a recording `bench` here: a
 * real Frappe bench cannot be built on these machines (no GitHub, no PyPI).
 */
describe.skipIf(missing.length > 0)("clone the box's repository on first start", () => {
  let stack: BoxGitStack;
  let gh: BoxGitStack["gh"];
  let git: BoxGitStack["git"];
  let cp: BoxGitStack["cp"];
  let tmp: string;
  let ghUser: BoxGitStack["ghUser"];
  let installationId: number;

  beforeAll(async () => {
    stack = await startBoxGitStack({ serverName: "clone-host", repos: ["app-a", "frappe_shop"] });
    ({ gh, git, cp, tmp, ghUser, installationId } = stack);
  }, 120_000);

  afterAll(async () => {
    await stack?.close();
  });

  /** Creates a box from `repo` and lays out what its guest's apply writes: metadata and repo files, an empty workspace. */
  async function boxFrom(name: string, repo: string) {
    const created = await cp.admin.post("/api/v1/boxes", { template: "minimal", name, repo });
    expect(created.status).toBe(202);
    await waitForBox(cp, name, "running");
    const dir = path.join(tmp, name);
    await mkdir(path.join(dir, "workspace"), { recursive: true });
    const meta = await writeBoxMetadata(stack, name, path.join(dir, "metadata"));
    await writeFile(path.join(dir, "repo"), `${meta.repo ?? ""}\n`);
    return { dir, meta };
  }

  /** doppio-clone as apply runs it (in `dir`), git's credential helper the box's (see the describe). */
  function cloneIn(dir: string, extra: Record<string, string> = {}) {
    return new Promise<{ code: number; out: string }>((resolve) => {
      execFile(
        CLONE,
        [],
        {
          cwd: dir,
          env: {
            PATH: process.env.PATH ?? "/usr/bin:/bin",
            HOME: dir,
            TMPDIR: dir,
            GIT_CONFIG_NOSYSTEM: "1",
            GIT_CONFIG_COUNT: "2",
            GIT_CONFIG_KEY_0: "credential.helper",
            GIT_CONFIG_VALUE_0: "",
            GIT_CONFIG_KEY_1: "credential.helper",
            GIT_CONFIG_VALUE_1: BOX_CREDENTIAL_HELPER,
            DOPPIO_METADATA_FILE: path.join(dir, "metadata"),
            DOPPIO_LIB: GUEST_LIB,
            DOPPIO_REPO_FILE: path.join(dir, "repo"),
            DOPPIO_WORKSPACE: path.join(dir, "workspace"),
            DOPPIO_CLONE_MODE_FILE: path.join(dir, "clone-mode"),
            DOPPIO_STATE_DIR: path.join(dir, "state"),
            DOPPIO_BOX_USER: process.env.USER ?? "root",
            ...extra,
          },
          timeout: 60_000,
        },
        (err, stdout, stderr) =>
          resolve({ code: err ? Number(err.code ?? 1) || 1 : 0, out: stdout + stderr }),
      );
    });
  }

  it("carries repo in the create job's payload and the guest's metadata; clones it into the workspace", async () => {
    const { dir, meta } = await boxFrom("cloner", "octo/app-a");
    expect(meta.repo).toBe("octo/app-a");
    // The configured GitHub web URL (GitHub Enterprise Server's case: not github.com).
    expect(meta.github_url).toBe(gh.webUrl);
    const job = await cp.admin.get("/api/v1/boxes/cloner");
    expect((job.body as { repo: string | null }).repo).toBe("octo/app-a");
    // Its commit author: the linked GitHub login; off github.com, the account's own email.
    const me = (await cp.admin.get("/api/v1/me")).body as { email: string };
    expect(meta.git_author).toEqual({ name: ghUser.login, email: me.email });

    const first = await cloneIn(dir);
    expect(first.out).toContain("doppio: clone: cloned octo/app-a into");
    expect(first.code).toBe(0);
    const ws = path.join(dir, "workspace");
    expect(await readdir(ws)).toEqual(["app-a"]);
    const origin = await new Promise<string>((r) =>
      execFile("git", ["-C", path.join(ws, "app-a"), "log", "--format=%s"], (_e, o) => r(o.trim())),
    );
    expect(origin).toBe("seed");
    expect(gh.tokenRequests.at(-1)).toMatchObject({ installationId, repositories: ["app-a"] });

    // Every start runs it again: a done clone asks nothing.
    const seen = git.requests.length;
    const again = await cloneIn(dir);
    expect(again).toEqual({ code: 0, out: "" });
    expect(git.requests.length).toBe(seen);
  });

  it("frappe template: bench get-app from the repository, then install-app on the current site, once", async () => {
    const { dir } = await boxFrom("bencher", "octo/frappe_shop");
    const bench = path.join(dir, "bench");
    await mkdir(path.join(bench, "apps", "frappe"), { recursive: true });
    await mkdir(path.join(bench, "sites"), { recursive: true });
    await writeFile(path.join(bench, "sites", "currentsite.txt"), "dev.localhost\n");
    await writeFile(path.join(dir, "clone-mode"), "bench\n");
    // A recording bench: get-app clones with git as bench does (so through the credential helper).
    const bin = path.join(dir, "bin");
    await mkdir(bin);
    await writeFile(
      path.join(bin, "bench"),
      `#!/bin/sh\necho "bench $*" >> '${dir}/bench.log'\ncase "$1" in\n  get-app) git clone --quiet "$2" "apps/$(basename "$2" .git)" ;;\n  --site) [ "$3" = install-app ] ;;\n  *) exit 9 ;;\nesac\n`,
    );
    await chmod(path.join(bin, "bench"), 0o755);
    const env = { DOPPIO_BENCH_DIR: bench, PATH: `${bin}:${process.env.PATH ?? "/usr/bin:/bin"}` };
    const first = await cloneIn(dir, env);
    expect(first.out).toContain("installed octo/frappe_shop as the app frappe_shop on dev.localhost");
    expect(first.code).toBe(0);
    expect((await readFile(path.join(dir, "bench.log"), "utf8")).trim().split("\n")).toEqual([
      `bench get-app ${gh.webUrl}/octo/frappe_shop.git`,
      "bench --site dev.localhost install-app frappe_shop",
    ]);
    expect((await readdir(path.join(bench, "apps"))).sort()).toEqual(["frappe", "frappe_shop"]);
    expect(await cloneIn(dir, env)).toEqual({ code: 0, out: "" });
  });

  it("refuses a repository name that is not owner/name before running anything", async () => {
    const dir = path.join(tmp, "hostile");
    await mkdir(path.join(dir, "workspace"), { recursive: true });
    for (const bad of ["octo/x';touch pwned;'", "octo/a/b", "-o/x", "octo/..", "../etc"]) {
      await writeFile(path.join(dir, "repo"), `${bad}\n`);
      const r = await cloneIn(dir);
      expect(r.code, bad).toBe(2);
      expect(r.out).toContain("refusing repository name");
    }
    expect(await readdir(path.join(dir, "workspace"))).toEqual([]);
    expect(existsSync(path.join(dir, "pwned"))).toBe(false);
  });

  it("refuses a GitHub URL that is not http(s)://host[:port] before running anything", async () => {
    const dir = path.join(tmp, "hostile-url");
    await mkdir(path.join(dir, "workspace"), { recursive: true });
    await writeFile(path.join(dir, "repo"), "octo/app-a\n");
    for (const bad of [
      `${gh.webUrl}/x';touch pwned;'`,
      "https://$(touch pwned)",
      "ext::sh -c touch% pwned",
    ]) {
      await writeFile(path.join(dir, "metadata"), `github=${bad}\n`);
      const r = await cloneIn(dir);
      expect(r.code, bad).toBe(2);
      expect(r.out).toContain("refusing the box's GitHub URL");
    }
    expect(await readdir(path.join(dir, "workspace"))).toEqual([]);
    expect(existsSync(path.join(dir, "pwned"))).toBe(false);
  });

  it("a failed clone leaves the workspace empty, says why, and succeeds when tried again", async () => {
    const { dir } = await boxFrom("cloner-2", "octo/app-a");
    gh.uninstall(installationId);
    const { body, headers } = gh.delivery("installation", {
      action: "deleted",
      installation: gh.installationJson(gh.installations.get(installationId)!),
      sender: { login: "octo", id: ghUser.id, type: "User", site_admin: false },
    });
    expect((await fetch(`${cp.url}/api/v1/github/webhooks`, { method: "POST", headers, body })).status).toBe(
      200,
    );

    const failed = await cloneIn(dir);
    expect(failed.code).toBe(1);
    expect(failed.out).toContain("doppio: clone: cloning octo/app-a failed");
    expect(failed.out).toContain("octo/app-a is no longer connected");
    expect(failed.out).toContain("run doppio-clone in a terminal to try again");
    expect(await readdir(path.join(dir, "workspace"))).toEqual([]);

    // The user connects the repository again; the next start (or doppio-clone) clones it.
    installationId = gh.install(ghUser, ["app-a"]).id;
    await connectInstallation(cp.admin, installationId);
    const retried = await cloneIn(dir);
    expect(retried.out).toContain("cloned octo/app-a");
    expect(retried.code).toBe(0);
    expect(await readdir(path.join(dir, "workspace"))).toEqual(["app-a"]);
  });
});
