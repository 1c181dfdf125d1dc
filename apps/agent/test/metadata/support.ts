import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import path from "node:path";
import type { StepReporter, Upstream, VmSpec } from "../../src/vmm/executor.ts";
import { FakeExecutor } from "../support/fake-executor.ts";

const REPO = path.resolve(import.meta.dirname, "../../../..");
export const HELPER = path.join(REPO, "images/common/rootfs/usr/local/bin/git-credential-doppio");
/** Where the guest's json.awk lives in the repo (build-debian.sh copies it into every image). */
export const GUEST_LIB = path.join(REPO, "images/minimal/rootfs/usr/lib/doppio");

/** The recording fake executor, also keeping the metadata each boot was given (as a guest would read it). */
export class MetadataRecordingFake extends FakeExecutor {
  readonly metadata = new Map<string, VmSpec["metadata"]>();

  override createFromGolden(spec: VmSpec, report: StepReporter): Promise<Upstream> {
    this.metadata.set(spec.slug, spec.metadata);
    return super.createFromGolden(spec, report);
  }

  override createColdBoot(spec: VmSpec, report: StepReporter): Promise<Upstream> {
    this.metadata.set(spec.slug, spec.metadata);
    return super.createColdBoot(spec, report);
  }

  override start(spec: VmSpec, report: StepReporter): Promise<Upstream> {
    this.metadata.set(spec.slug, spec.metadata);
    return super.start(spec, report);
  }

  override reset(spec: VmSpec, report: StepReporter): Promise<Upstream> {
    this.metadata.set(spec.slug, spec.metadata);
    return super.reset(spec, report);
  }
}

/** Runs a program with `input` on stdin; never rejects (the exit code is part of the result). */
export function run(
  file: string,
  args: string[],
  input: string,
  env: Record<string, string>,
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = execFile(
      file,
      args,
      { env: { PATH: process.env.PATH ?? "/usr/bin:/bin", ...env }, timeout: 20_000 },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === "number" ? err.code : 1) : 0;
        resolve({ code, stdout, stderr });
      },
    );
    // A program may exit without reading its input; that is its answer, not a test error.
    child.stdin!.on("error", () => {});
    child.stdin!.end(input);
  });
}

/** A program on PATH, or null. */
export function which(name: string): string | null {
  for (const dir of (process.env.PATH ?? "").split(":")) {
    const p = path.join(dir, name);
    if (dir && existsSync(p)) return p;
  }
  return null;
}
