import { existsSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { HELPER, MetadataRecordingFake } from "../../../agent/test/metadata/support.ts";
import {
  startAgent,
  startCp,
  type TestAgent,
  type TestCp,
  waitForHeartbeat,
} from "../../../agent/test/support/agent-harness.ts";
import { GitHttpServer, hasGitHttpBackend } from "./git-server.ts";
import { githubConfig, linkAndConnect } from "./github.ts";
import { GitHubStandIn, type StandInUser } from "./github-standin.ts";
import { freePort } from "./ports.ts";

/** What git as a box runs it needs on this machine; empty when everything is there. */
export const boxGitMissing = [
  hasGitHttpBackend ? null : "git-http-backend (apt-get install git)",
  existsSync("/bin/busybox") ? null : "/bin/busybox (apt-get install busybox-static)",
].filter((m): m is string => m !== null);

/**
 * git's credential helper option for a box's side run on the host: the box's own helper
 * (git-credential-doppio), which answers only for the `github=` origin of its metadata file
 * (writeBoxMetadata: the control plane's GitHub web URL, the stand-in's, which serves Git).
 */
export const BOX_CREDENTIAL_HELPER = `!'${HELPER}'`;

/**
 * Everything git in a box talks to, for real: a control plane with the GitHub App configured
 * against the GitHub stand-in, an agent (its metadata service listening; VMs recorded by a
 * fake), a smart-HTTP Git server (git-http-backend) that takes only the stand-in's tokens,
 * and user "octo" whose installation covers `repos` (each an `octo/<name>` repository).
 */
export async function startBoxGitStack(opts: { serverName: string; repos: string[] }) {
  const tmp = await mkdtemp(path.join(tmpdir(), `doppio-${opts.serverName}-`));
  const gh = new GitHubStandIn();
  let git: GitHttpServer | undefined;
  let cp: TestCp | undefined;
  let agent: TestAgent | undefined;
  const close = async () => {
    await agent?.close();
    await cp?.close();
    await git?.stop();
    await gh.stop();
    await rm(tmp, { recursive: true, force: true });
  };
  try {
    await gh.start();
    git = new GitHttpServer(path.join(tmp, "srv"), (t, repo, write) => gh.gitAccess(t, repo, write));
    await git.start();
    // Git on the web origin, as on github.com: the boxes' GitHub URL is the control plane's.
    const server = git;
    gh.git = (req, res) => server.handle(req, res);
    for (const repo of opts.repos) await git.createRepo(`octo/${repo}`);
    cp = await startCp(opts.serverName, githubConfig(gh));
    const fake = new MetadataRecordingFake({ golden: { minimal: "ready" } });
    agent = await startAgent({
      cpUrl: cp.url,
      token: cp.agentToken,
      listen: true,
      config: { networkMode: "user", metadata: { port: await freePort() } },
      backend: () => ({ executor: fake, network: fake }),
    });
    await waitForHeartbeat(cp);
    const ghUser: StandInUser = gh.addUser("octo", [
      { email: "octo@example.com", primary: true, verified: true },
    ]);
    const installationId = gh.install(ghUser, opts.repos).id;
    await linkAndConnect(cp.admin, gh, ghUser, installationId);
    return { tmp, gh, git, cp, agent, fake, ghUser, installationId, close };
  } catch (err) {
    await close();
    throw err;
  }
}
export type BoxGitStack = Awaited<ReturnType<typeof startBoxGitStack>>;

/** What the guest's init writes into /run/doppio/metadata from the box's boot metadata. */
export async function writeBoxMetadata(stack: BoxGitStack, slug: string, file: string) {
  const meta = stack.fake.metadata.get(slug)!;
  await writeFile(
    file,
    `url=${stack.agent.agent.metadata.url}\ntoken=${meta.secrets.metadata_token}\ngithub=${meta.github_url}\n`,
    { mode: 0o600 },
  );
  return meta;
}
