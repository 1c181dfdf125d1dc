import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdir, readFile, rm } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { findTemplate, type TemplateDescriptor } from "@doppio/contracts";
import type { Logger } from "pino";
import type { StepReporter, TemplateSpec } from "../vmm/executor.ts";
import { buildEnv } from "./build-env.ts";
import { ImageError } from "./errors.ts";
import { type ImageStore, type ImageVersion, versionName } from "./store.ts";

/** The checkout the agent runs from: recipes live in its images/ and scripts/. */
export const REPO_DIR = resolve(dirname(fileURLToPath(import.meta.url)), "../../../..");

/** Exit status the recipe scripts use for "this host cannot reach a network it needs". */
const EXIT_NETWORK_UNREACHABLE = 3;
/**
 * Exit status for "a toolchain requirement cannot be met" (e.g. a Frappe branch needs a Node
 * or Python the image cannot get); the recipe's last stderr line naming the toolchain says which.
 */
const EXIT_TOOLCHAIN_UNSUPPORTED = 4;

/** The recipe's refusal behind an EXIT_TOOLCHAIN_UNSUPPORTED: its last stderr line about the toolchain. */
function refusal(stderrLines: string[]): string | undefined {
  return stderrLines.findLast((l) => /\btoolchain\b/i.test(l)) ?? stderrLines.at(-1);
}

export interface BuildImageOptions {
  /** Repository checkout holding images/ and scripts/. */
  repoDir: string;
  store: ImageStore;
  log: Logger;
  now?: () => Date;
  /** Root disk size; the template's default otherwise. */
  size?: string;
  /** Version directory name; `<timestamp>-<hash12>` otherwise. */
  version?: string;
  /**
   * Extra environment for the recipe (e.g. FRAPPE_BRANCH, DOPPIO_IMAGE_CACHE). Of the
   * agent's own environment the recipe sees only the allow-list in build-env.ts.
   */
  env?: Record<string, string>;
}

export interface BuildImageResult {
  template: string;
  version: string;
  inputsHash: string;
  /** True when a build of the same inputs was already in the store. */
  cached: boolean;
  diskBytes: number;
  ms: number;
  /** The golden snapshot must be rebuilt from this version before new boxes use it. */
  goldenStale: boolean;
}

/**
 * Runs the template's recipe into the image store, streaming its output as log lines and
 * its phases as steps (build_rootfs, then write_image), and marks the template's golden
 * snapshot stale when the current image changed. A build of the same inputs is reused.
 */
export async function buildImage(
  t: TemplateDescriptor,
  report: StepReporter,
  opts: BuildImageOptions,
): Promise<BuildImageResult> {
  const now = opts.now ?? (() => new Date());
  const started = Date.now();
  const size = opts.size ?? t.defaultSize;
  const script = join(opts.repoDir, t.recipe.script);
  const env = buildEnv(process.env, opts.env);
  const before = await opts.store.current(t.name);

  if (t.recipe.kind === "debian") {
    const hash = (
      await runScript(script, [t.name, "/nonexistent", "--size", size, "--hash-only"], env)
    ).trim();
    const hit = await opts.store.findByHash(t.name, hash);
    if (hit) return finish(hit, true);
  }

  const tmp = join(opts.store.templateDir(t.name), `.incoming-${randomBytes(4).toString("hex")}`);
  await mkdir(opts.store.templateDir(t.name), { recursive: true });
  const args = [t.name, tmp, "--size", size];
  try {
    await streamBuild(script, args, env, report);
    const inputsHash = (await readFile(join(tmp, ".inputs-hash"), "utf8")).trim();
    const hit = await opts.store.findByHash(t.name, inputsHash);
    if (hit) {
      await rm(tmp, { recursive: true, force: true });
      return finish(hit, true);
    }
    const v = await opts.store.commit(t.name, tmp, opts.version ?? versionName(now(), inputsHash));
    return finish(v, false);
  } catch (err) {
    await rm(tmp, { recursive: true, force: true });
    throw err;
  }

  async function finish(v: ImageVersion, cached: boolean): Promise<BuildImageResult> {
    await opts.store.setCurrent(v);
    const changed = before?.version !== v.version;
    if (changed) await opts.store.markGoldenStale(t.name, v.version, now());
    const goldenStale = (await opts.store.goldenStale(t.name))?.version === v.version;
    const ms = Date.now() - started;
    opts.log.info({ template: t.name, version: v.version, cached, ms, bytes: v.diskBytes }, "image ready");
    return {
      template: t.name,
      version: v.version,
      inputsHash: v.inputsHash,
      cached,
      diskBytes: v.diskBytes,
      ms,
      goldenStale,
    };
  }
}

/** Runs the recipe; "STEP write_image" on stdout ends the build_rootfs step. */
async function streamBuild(
  script: string,
  args: string[],
  env: NodeJS.ProcessEnv,
  report: StepReporter,
): Promise<void> {
  let toWrite!: () => void;
  const reachedWrite = new Promise<void>((resolve) => {
    toWrite = resolve;
  });
  const tail: string[] = [];
  const errors: string[] = [];
  const onLine = (line: string, fromStderr = false) => {
    if (line === "STEP write_image") toWrite();
    const clean = line.replace(/[^\x20-\x7e\t]/g, "").slice(0, 2000);
    if (clean.trim()) {
      report.log(clean);
      tail.push(clean);
      if (tail.length > 12) tail.shift();
      if (fromStderr) errors.push(clean);
      if (errors.length > 12) errors.shift();
    }
  };
  const child = spawn(script, args, { env, stdio: ["ignore", "pipe", "pipe"] });
  const done = new Promise<void>((resolve, reject) => {
    child.once("error", (err) =>
      reject(new ImageError("build_failed", `cannot run ${script}`, { cause: err })),
    );
    child.once("close", (code) => {
      if (code === 0) return resolve();
      const msg = tail.join(" | ").slice(-1500);
      reject(
        code === EXIT_NETWORK_UNREACHABLE
          ? new ImageError("network_unreachable", tail.find((l) => l.includes("cannot reach")) ?? msg)
          : code === EXIT_TOOLCHAIN_UNSUPPORTED
            ? new ImageError("toolchain_unsupported", refusal(errors) ?? msg)
            : new ImageError("build_failed", `${script} exited ${code}: ${msg}`),
      );
    });
  });
  lines(child.stdout, onLine);
  lines(child.stderr, (l) => onLine(l, true));
  await report.step("build_rootfs", () => Promise.race([reachedWrite, done]));
  await report.step("write_image", () => done);
}

function lines(stream: NodeJS.ReadableStream, onLine: (line: string) => void): void {
  let buf = "";
  stream.setEncoding("utf8");
  stream.on("data", (chunk: string) => {
    buf += chunk;
    let i = buf.indexOf("\n");
    while (i >= 0) {
      onLine(buf.slice(0, i).replace(/\r$/, ""));
      buf = buf.slice(i + 1);
      i = buf.indexOf("\n");
    }
  });
  stream.on("end", () => {
    if (buf) onLine(buf);
  });
}

function runScript(script: string, args: string[], env: NodeJS.ProcessEnv): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(script, args, { env, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    child.stdout.on("data", (d: Buffer) => {
      out += d;
    });
    child.stderr.on("data", (d: Buffer) => {
      err += d;
    });
    child.once("error", (e) => reject(new ImageError("build_failed", `cannot run ${script}`, { cause: e })));
    child.once("close", (code) => {
      if (code === 0) return resolve(out);
      reject(
        code === EXIT_TOOLCHAIN_UNSUPPORTED
          ? new ImageError("toolchain_unsupported", refusal(err.trim().split("\n")) ?? err.trim())
          : new ImageError("build_failed", `${script} ${args.join(" ")} exited ${code}: ${err.trim()}`),
      );
    });
  });
}

/**
 * The agent's ImageBuilder (jobs/registry.ts) for the build_image handler: builds the
 * named template into the store and answers with the version and the golden's staleness.
 * Versions are named after build time and inputs, never after the control plane's template
 * version: new inputs under the same template version must get a new directory.
 */
export class HostImageBuilder {
  readonly #opts: Omit<BuildImageOptions, "version" | "size">;

  constructor(opts: Omit<BuildImageOptions, "version" | "size">) {
    this.#opts = opts;
  }

  async build(template: TemplateSpec, report: StepReporter): Promise<BuildImageResult> {
    const t = findTemplate(template.name);
    if (!t) throw new ImageError("unknown_template", `no recipe for template "${template.name}"`);
    return { ...(await buildImage(t, report, this.#opts)) };
  }
}
