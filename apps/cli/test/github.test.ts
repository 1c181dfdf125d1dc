import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { signedInClient, type TestClient } from "../../api/test/support/client.ts";
import { startControlPlane, type TestControlPlane } from "../../api/test/support/control-plane.ts";
import { githubConfig, linkAndConnect } from "../../api/test/support/github.ts";
import { GitHubStandIn } from "../../api/test/support/github-standin.ts";
import { buildCli, type CliHome, cliHome } from "./support/cli.ts";

/** `doppio github …` and `doppio create --repo` against a real control plane and the GitHub stand-in. */
describe("doppio github", () => {
  const gh = new GitHubStandIn();
  let cp: TestControlPlane;
  let home: CliHome;
  let user: TestClient;

  beforeAll(async () => {
    await gh.start();
    const [started] = await Promise.all([startControlPlane({ config: githubConfig(gh) }), buildCli()]);
    cp = started;
    user = await signedInClient(cp.url, "cli-gh");
    const token = await user.post("/api/v1/tokens", { name: "cli" });
    home = await cliHome();
    const login = await home.run(["login", "--url", cp.url, "--token", token.body.token]);
    expect(login.code, login.stderr).toBe(0);
  });
  afterAll(async () => {
    await cp?.close();
    await gh.stop();
    await home?.cleanup();
  });

  it("shows an unlinked account, and refuses to connect before linking", async () => {
    const status = await home.run(["github", "status"]);
    expect(status.code).toBe(0);
    expect(status.stdout).toContain("not linked");
    expect(status.stdout).toContain(`${cp.url}/dashboard/settings`);
    const connect = await home.run(["github", "connect"]);
    expect(connect.code).toBe(1);
    expect(connect.stderr).toContain("link your GitHub account first");
    const repos = await home.run(["github", "repos"]);
    expect(repos.code).toBe(1);
    expect(repos.stderr).toContain("no repositories connected");
  });

  it("lists the linked account, installations and repositories; prints the install link", async () => {
    const ghUser = gh.addUser("cli-octo", [{ email: "cli-octo@example.com", primary: true, verified: true }]);
    const inst = gh.install(ghUser, ["web", "api"]);
    await linkAndConnect(user, gh, ghUser, inst.id);

    const status = await home.run(["github", "status"]);
    expect(status.stdout).toMatch(/^account:\s+cli-octo \(linked /);
    expect(status.stdout).toMatch(new RegExp(`${inst.id}\\s+cli-octo \\(User\\)\\s+selected\\s+active`));
    const repos = await home.run(["github", "repos"]);
    expect(
      repos.stdout
        .split("\n")
        .slice(1, 3)
        .map((l) => l.split(/\s+/)[0]),
    ).toEqual(["cli-octo/api", "cli-octo/web"]);
    const json = JSON.parse((await home.run(["github", "repos", "--json"])).stdout);
    expect(json).toEqual([
      { fullName: "cli-octo/api", private: true, installationId: inst.id },
      { fullName: "cli-octo/web", private: true, installationId: inst.id },
    ]);
    const link = JSON.parse((await home.run(["github", "connect", "--json"])).stdout);
    expect(link.url).toMatch(new RegExp(`^${gh.webUrl}/apps/${gh.appSlug}/installations/new\\?state=`));
  });

  it("create --repo: a malformed name is a usage error; an unconnected one is refused by the server", async () => {
    const bad = await home.run(["create", "--template", "minimal", "--repo", "not a repo", "--no-wait"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("--repo");
    const foreign = await home.run([
      "create",
      "--template",
      "minimal",
      "--repo",
      "someone/else",
      "--no-wait",
    ]);
    expect(foreign.code).toBe(2);
    expect(foreign.stderr).toContain('repository "someone/else" is not one you connected');
  });
});
