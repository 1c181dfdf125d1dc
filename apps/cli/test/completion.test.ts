import { spawnSync } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildCli, type CliHome, cliHome } from "./support/cli.ts";

const hasZsh = spawnSync("zsh", ["--version"]).status === 0;
if (!hasZsh) console.warn("SKIPPING zsh completion checks: zsh is not installed (apt-get install zsh)");

/** Runs the bash completion function for a command line, returning what it offers. */
function bashComplete(script: string, words: string[]): string[] {
  const program = `source /dev/stdin <<'DOPPIO_EOF'\n${script}\nDOPPIO_EOF\nCOMP_WORDS=(${words.map((w) => `'${w}'`).join(" ")}); COMP_CWORD=${words.length - 1}; _doppio; printf '%s\\n' "\${COMPREPLY[@]}"`;
  const r = spawnSync("bash", ["--norc", "--noprofile", "-c", program], { encoding: "utf8" });
  expect(r.stderr).toBe("");
  return r.stdout.split("\n").filter(Boolean);
}

describe("doppio completion", () => {
  let home: CliHome;
  beforeAll(async () => {
    await buildCli();
    home = await cliHome();
  });
  afterAll(() => home?.cleanup());

  it("offers commands, subcommands and options in bash", async () => {
    const r = await home.run(["completion", "bash"]);
    expect(r.code).toBe(0);
    expect(spawnSync("bash", ["-n"], { input: r.stdout }).status).toBe(0);
    expect(bashComplete(r.stdout, ["doppio", "st"])).toEqual(["start", "stop", "status"]);
    expect(bashComplete(r.stdout, ["doppio", "context", "u"])).toEqual(["use"]);
    // The value of --context is skipped when finding the command.
    expect(bashComplete(r.stdout, ["doppio", "--context", "prod", "create", "--t"])).toEqual(["--template"]);
    expect(bashComplete(r.stdout, ["doppio", "rm", "--y"])).toEqual(["--yes"]);
    expect(bashComplete(r.stdout, ["doppio", "logs", "--"])).toEqual([
      "--follow",
      "--tail",
      "--source",
      "--json",
      "--help",
    ]);
  });

  it.skipIf(!hasZsh)("prints a zsh script that parses and completes options", async () => {
    const r = await home.run(["completion", "zsh"]);
    expect(r.code).toBe(0);
    expect(r.stdout.startsWith("#compdef doppio\n")).toBe(true);
    expect(spawnSync("zsh", ["-n"], { input: r.stdout }).status).toBe(0);
    // compadd and _describe stand in for the completion system, printing what they are given.
    const program = [
      'compadd() { print -r -- "ADD $*"; }',
      // biome-ignore lint/suspicious/noTemplateCurlyInString: a zsh parameter expansion, not a template
      '_describe() { print -r -- "DESCRIBE ${(P)2}"; }',
      "compdef() {}",
      'eval "$(cat)"',
      "words=(doppio stop --); CURRENT=3; _doppio",
      "words=(doppio); CURRENT=2; _doppio",
    ].join("\n");
    const z = spawnSync("zsh", ["-f", "-c", program], { input: r.stdout, encoding: "utf8" });
    expect(z.stderr).toBe("");
    expect(z.stdout).toContain("ADD -- --no-wait --json --help");
    expect(z.stdout).toMatch(/DESCRIBE .*ls:list your boxes/);
  });

  it("refuses other shells as a usage error", async () => {
    expect((await home.run(["completion", "fish"])).code).toBe(2);
  });
});
