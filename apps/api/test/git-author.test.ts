import { DEFAULT_GITHUB_WEB_URL, GitAuthor } from "@doppio/contracts";
import { describe, expect, it } from "vitest";
import { gitAuthorOf } from "../src/services/git-author.ts";

const GHES = "https://git.example.com";
const account = { email: "ada@example.com", name: "Ada Lovelace" };
const octo = { githubId: 583231, login: "octo" };

describe("a box's git commit author (gitAuthorOf)", () => {
  it("GitHub linked on github.com: the login and GitHub's private noreply address", () => {
    expect(gitAuthorOf(account, octo, DEFAULT_GITHUB_WEB_URL)).toEqual({
      name: "octo",
      email: "583231+octo@users.noreply.github.com",
    });
  });

  it("GitHub linked on an Enterprise Server: the login and the account's email (no noreply there)", () => {
    expect(gitAuthorOf(account, octo, GHES)).toEqual({ name: "octo", email: "ada@example.com" });
  });

  it("no GitHub: the account's name, else the email's local part", () => {
    expect(gitAuthorOf(account, null, DEFAULT_GITHUB_WEB_URL)).toEqual({
      name: "Ada Lovelace",
      email: "ada@example.com",
    });
    expect(gitAuthorOf({ email: "bob@example.com", name: null }, null, GHES)).toEqual({
      name: "bob",
      email: "bob@example.com",
    });
    expect(gitAuthorOf({ email: "bob@example.com", name: " \t " }, null, GHES)?.name).toBe("bob");
  });

  it("a name cannot carry gitconfig syntax or control characters into the guest", () => {
    const hostile = 'Eve"\n[core]\n\tsshCommand = rm -rf ~ <x> \\';
    const author = gitAuthorOf({ email: "eve@example.com", name: hostile }, null, GHES)!;
    expect(author.name).toBe("Eve[core]sshCommand = rm -rf ~ x");
    expect(GitAuthor.safeParse(author).success).toBe(true);
    expect(gitAuthorOf({ email: "eve@example.com", name: "José Núñez" }, null, GHES)?.name).toBe(
      "José Núñez",
    );
  });

  it("an email the guest could not take gives no author at all", () => {
    expect(gitAuthorOf({ email: 'x"@example.com', name: "X" }, null, GHES)).toBeNull();
    expect(gitAuthorOf({ email: "x@localhost", name: "X" }, null, GHES)).toBeNull();
  });

  it("the contract refuses what the guest's gitconfig could not hold", () => {
    for (const name of ['a"b', "a\\b", "a\nb", "a<b>", "", "x".repeat(101)]) {
      expect(GitAuthor.safeParse({ name, email: "a@b.co" }).success, JSON.stringify(name)).toBe(false);
    }
    for (const email of ["a b@c.de", "a@b", "a@b.c\n", "<a@b.cd>", `${"a".repeat(65)}@b.cd`]) {
      expect(GitAuthor.safeParse({ name: "A", email }).success, JSON.stringify(email)).toBe(false);
    }
  });
});
