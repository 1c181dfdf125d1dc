import type { Command } from "commander";
import type { App } from "../app.ts";
import { failed } from "../errors.ts";
import { examples, printJson, printKeyValues, renderTable } from "../output.ts";

/** `doppio github status|connect|repos`: the GitHub connection of the signed-in account. */
export function registerGitHubCommands(program: Command, app: App): void {
  const github = program
    .command("github")
    .description("your GitHub connection: linked account, installations, repositories");

  github
    .command("status")
    .description("show the linked GitHub account and the app's installations")
    .option("--json", "print JSON")
    .addHelpText("after", examples("doppio github status", "doppio github status --json | jq .account.login"))
    .action(async (opts: { json?: boolean }) => {
      const status = await (await app.api()).github();
      if (opts.json) return printJson(app.io.stdout, status);
      if (!status.configured) {
        app.io.stdout.write("GitHub is not configured on this doppiobox (ask its operator).\n");
        return;
      }
      const target = await app.target();
      printKeyValues(app.io.stdout, [
        [
          "account",
          status.account ? `${status.account.login} (linked ${status.account.linkedAt})` : "not linked",
        ],
        ["installations", String(status.installations.length)],
        ["repositories", String(status.repositories.length)],
      ]);
      if (status.installations.length > 0) {
        app.io.stdout.write(
          `${renderTable(
            ["INSTALLATION", "ACCOUNT", "REPOSITORIES", "STATE"],
            status.installations.map((i) => [
              String(i.id),
              `${i.account} (${i.accountType})`,
              i.repositorySelection,
              i.state,
            ]),
          )}\n`,
        );
      }
      if (!status.account) {
        app.io.stdout.write(`Link GitHub in the dashboard: ${target.url}/dashboard/settings\n`);
      }
    });

  github
    .command("connect")
    .description("print the link that installs the GitHub App on your account or an organisation")
    .option("--json", "print JSON ({url, expiresAt})")
    .addHelpText(
      "after",
      examples("doppio github connect", 'xdg-open "$(doppio github connect --json | jq -r .url)"'),
    )
    .action(async (opts: { json?: boolean }) => {
      const link = await (await app.api()).connectGitHub();
      if (opts.json) return printJson(app.io.stdout, link);
      app.io.stdout.write(
        `Open this link in the browser where you are signed in to doppio (valid until ${link.expiresAt}):\n${link.url}\n`,
      );
    });

  github
    .command("repos")
    .description("list the repositories your boxes can be created from and push to")
    .option("--json", "print JSON")
    .addHelpText("after", examples("doppio github repos", "doppio create --template code --repo OWNER/NAME"))
    .action(async (opts: { json?: boolean }) => {
      const repos = await (await app.api()).githubRepos();
      if (opts.json) return printJson(app.io.stdout, repos);
      if (repos.length === 0) {
        throw failed("no repositories connected", "connect some with: doppio github connect");
      }
      app.io.stdout.write(
        `${renderTable(
          ["REPOSITORY", "VISIBILITY", "INSTALLATION"],
          repos.map((r) => [r.fullName, r.private ? "private" : "public", String(r.installationId)]),
        )}\n`,
      );
    });
}
