import { execFile } from "node:child_process";
import { writeFile } from "node:fs/promises";
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

const missing = boxGitMissing;
if (missing.length) console.warn(`SKIPPING GitHub push test: missing ${missing.join(", ")}`);

/**
 * A real `git push` with a token the control plane minted: git → the box's credential
 * helper (images/common/rootfs/usr/local/bin/git-credential-doppio) → the agent's metadata
 * service → the control plane → the GitHub stand-in (app JWT, installation token scoped to
 * the box's repository) → a real smart-HTTP Git server (git-http-backend) that accepts only
 * tokens the stand-in issued for that repository, served on the stand-in's web origin as
 * GitHub serves Git. Runs on the host (the box's side is the helper and its metadata file);
 * the helper answers only for the GitHub web URL the control plane put in the box's metadata.
 */
describe.skipIf(missing.length > 0)("git push with a GitHub App installation token", () => {
  let stack: BoxGitStack;
  let gh: BoxGitStack["gh"];
  let git: BoxGitStack["git"];
  let cp: BoxGitStack["cp"];
  let tmp: string;
  let ghUser: BoxGitStack["ghUser"];
  let installationId: number;
  let metaFile: string;

  beforeAll(async () => {
    stack = await startBoxGitStack({ serverName: "push-host", repos: ["app-a", "app-b"] });
    ({ gh, git, cp, tmp, ghUser, installationId } = stack);
    const created = await cp.admin.post("/api/v1/boxes", {
      template: "minimal",
      name: "pusher",
      repo: "octo/app-a",
    });
    expect(created.status).toBe(202);
    await waitForBox(cp, "pusher", "running");
    metaFile = path.join(tmp, "metadata");
    await writeBoxMetadata(stack, "pusher", metaFile);
  }, 120_000);

  afterAll(async () => {
    await stack?.close();
  });

  function gitRun(args: string[], cwd = tmp) {
    return new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
      execFile(
        "git",
        ["-c", "credential.helper=", "-c", `credential.helper=${BOX_CREDENTIAL_HELPER}`, ...args],
        {
          cwd,
          env: {
            PATH: process.env.PATH ?? "/usr/bin:/bin",
            HOME: tmp,
            GIT_TERMINAL_PROMPT: "0",
            GIT_CONFIG_NOSYSTEM: "1",
            GIT_AUTHOR_NAME: "Box User",
            GIT_AUTHOR_EMAIL: "box@example.invalid",
            GIT_COMMITTER_NAME: "Box User",
            GIT_COMMITTER_EMAIL: "box@example.invalid",
            DOPPIO_METADATA_FILE: metaFile,
            DOPPIO_LIB: GUEST_LIB,
          },
          timeout: 60_000,
        },
        (err, stdout, stderr) => resolve({ code: err ? Number(err.code ?? 1) || 1 : 0, stdout, stderr }),
      );
    });
  }

  async function commitIn(dir: string, message: string) {
    await writeFile(path.join(dir, `${message.replace(/\W+/g, "-")}.txt`), `${message}\n`);
    expect((await gitRun(["add", "."], dir)).code).toBe(0);
    expect((await gitRun(["commit", "-m", message], dir)).code).toBe(0);
  }

  it("clones and pushes the box's repository with the minted token", async () => {
    const clone = await gitRun(["clone", `${gh.webUrl}/octo/app-a.git`, "app-a"]);
    expect(clone.stderr).not.toContain("fatal");
    expect(clone.code).toBe(0);
    const dir = path.join(tmp, "app-a");
    await commitIn(dir, "edit from the box");
    const push = await gitRun(["push", "origin", "main"], dir);
    expect(push.stderr).not.toContain("fatal");
    expect(push.code).toBe(0);
    expect(await git.log("octo/app-a")).toEqual(["edit from the box", "seed"]);
    expect(gh.tokenRequests.at(-1)).toMatchObject({ installationId, repositories: ["app-a"] });
  });

  it("cannot push the same token to another repository of the installation", async () => {
    const dir = path.join(tmp, "app-a");
    expect((await gitRun(["remote", "add", "b", `${gh.webUrl}/octo/app-b.git`], dir)).code).toBe(0);
    const push = await gitRun(["push", "b", "main"], dir);
    expect(push.code).not.toBe(0);
    expect(push.stderr).toContain("403");
    expect(await git.log("octo/app-b")).toEqual(["seed"]);
    expect(git.requests.at(-1)).toMatchObject({ repo: "octo/app-b", status: 403 });
  });

  it("hands the token to no origin but the box's GitHub URL (same Git server, another port)", async () => {
    const dir = path.join(tmp, "app-a");
    const before = git.requests.length;
    // The Git server's own listener: the same repositories, not the configured origin.
    expect((await gitRun(["remote", "add", "direct", `${git.url}/octo/app-a.git`], dir)).code).toBe(0);
    const push = await gitRun(["push", "direct", "main"], dir);
    expect(push.code).not.toBe(0);
    expect(push.stderr).toContain("could not read Username");
    // Asked without credentials only: no request carried a token.
    expect(git.requests.slice(before).every((r) => r.status === 401)).toBe(true);
    expect(await git.log("octo/app-a")).toEqual(["edit from the box", "seed"]);
  });

  it("is refused once the token has expired at GitHub", async () => {
    const dir = path.join(tmp, "app-a");
    await commitIn(dir, "after expiry");
    gh.offsetMs = 2 * 3_600_000;
    try {
      const push = await gitRun(["push", "origin", "main"], dir);
      expect(push.code).not.toBe(0);
      expect(git.requests.at(-1)).toMatchObject({ repo: "octo/app-a", status: 401 });
    } finally {
      gh.offsetMs = 0;
    }
    expect(await git.log("octo/app-a")).toEqual(["edit from the box", "seed"]);
  });

  it("is refused once the installation is removed, and the control plane refuses new tokens", async () => {
    const dir = path.join(tmp, "app-a");
    gh.uninstall(installationId);
    const { body, headers } = gh.delivery("installation", {
      action: "deleted",
      installation: gh.installationJson(gh.installations.get(installationId)!),
      sender: { login: "octo", id: ghUser.id, type: "User", site_admin: false },
    });
    expect((await fetch(`${cp.url}/api/v1/github/webhooks`, { method: "POST", headers, body })).status).toBe(
      200,
    );
    // The agent still holds the box's token; GitHub (here the Git server) refuses it, git
    // erases it, and the erase drops the agent's copy...
    const push = await gitRun(["push", "origin", "main"], dir);
    expect(push.code).not.toBe(0);
    expect(git.requests.at(-1)).toMatchObject({ repo: "octo/app-a", status: 401 });
    // ...so the next push asks the control plane and the box's terminal says why.
    const next = await gitRun(["push", "origin", "main"], dir);
    expect(next.code).not.toBe(0);
    expect(next.stderr).toContain("git-credential-doppio: ");
    expect(next.stderr).toContain("octo/app-a is no longer connected");
    expect(await git.log("octo/app-a")).toEqual(["edit from the box", "seed"]);
    const asked = await fetch(`${cp.url}/agent/v1/boxes/pusher/git-credential`, {
      method: "POST",
      headers: { authorization: `Bearer ${cp.agentToken}`, "content-type": "application/json" },
      body: "{}",
    });
    expect(asked.status).toBe(404);
    expect(((await asked.json()) as { error: { message: string } }).error.message).toContain(
      "octo/app-a is no longer connected",
    );
  });
});
