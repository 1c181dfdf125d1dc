#!/usr/bin/env node
// Packs an installable tarball: the bundle, the bin shim and a package.json without
// dependencies (everything is bundled; @doppio/contracts is a workspace package that is not
// on any registry). Install it with: npm install -g apps/cli/dist/doppio-cli-<version>.tgz
import { execFile } from "node:child_process";
import { copyFile, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const run = promisify(execFile);
const root = fileURLToPath(new URL("..", import.meta.url));
await run(process.execPath, [path.join(root, "scripts", "build.mjs")]);

const source = JSON.parse(await readFile(path.join(root, "package.json"), "utf8"));
const stage = await mkdtemp(path.join(tmpdir(), "doppio-pack-"));
try {
  await mkdir(path.join(stage, "bin"));
  await mkdir(path.join(stage, "dist"));
  await copyFile(path.join(root, "bin", "doppio.js"), path.join(stage, "bin", "doppio.js"));
  await copyFile(path.join(root, "dist", "doppio.mjs"), path.join(stage, "dist", "doppio.mjs"));
  await copyFile(path.join(root, "README.md"), path.join(stage, "README.md"));
  const manifest = {
    name: "doppio-cli",
    version: source.version,
    description: "Command-line client for doppiobox dev boxes",
    type: "module",
    bin: { doppio: "bin/doppio.js" },
    files: ["bin", "dist", "README.md"],
    engines: { node: ">=20" },
  };
  await writeFile(path.join(stage, "package.json"), `${JSON.stringify(manifest, null, 2)}\n`);
  const dest = path.join(root, "dist");
  const { stdout } = await run("npm", ["pack", "--json", "--pack-destination", dest], { cwd: stage });
  const [{ filename }] = JSON.parse(stdout);
  console.log(path.join(dest, filename));
} finally {
  await rm(stage, { recursive: true, force: true });
}
