import { access, readdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { ImageError } from "./errors.ts";

/** What `manifest.json` in a version directory records (written by the recipe scripts). */
interface ImageManifest {
  template: string;
  inputsHash: string;
  builtAt: string;
  [key: string]: unknown;
}

export interface ImageVersion {
  template: string;
  version: string;
  dir: string;
  inputsHash: string;
  /** Bytes allocated on the host by the version's files. */
  diskBytes: number;
  manifest: ImageManifest;
}

const IMAGE_FILES = ["vmlinuz", "initrd.img", "rootfs.qcow2"] as const;
const VERSION_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$/;

function checkImageVersion(version: string): void {
  if (!VERSION_RE.test(version)) throw new ImageError("invalid_version", `bad image version ${version}`);
}

/** `20261129T094500-<hash12>`: sorts by build time, names its inputs. */
export function versionName(now: Date, inputsHash: string): string {
  const stamp = now
    .toISOString()
    .replace(/[-:]/g, "")
    .replace(/\.\d+Z$/, "");
  return `${stamp}-${inputsHash.slice(0, 12)}`;
}

/**
 * Versioned template images on the host, in the layout the QEMU executor reads:
 * `<imagesDir>/<template>/<version>/{vmlinuz,initrd.img,rootfs.qcow2,manifest.json}`.
 * A version directory is never replaced (golden disks back onto its rootfs); builds land
 * in a dot-directory and are renamed into place. `current.json` names the newest build,
 * `golden-stale.json` says the template's golden snapshot predates it.
 */
export class ImageStore {
  constructor(readonly imagesDir: string) {}

  templateDir(template: string): string {
    return join(this.imagesDir, template);
  }

  versionDir(template: string, version: string): string {
    checkImageVersion(version);
    return join(this.imagesDir, template, version);
  }

  /** A complete version (all files and a manifest), or null. */
  async get(template: string, version: string): Promise<ImageVersion | null> {
    const dir = this.versionDir(template, version);
    const manifest = await readJson<ImageManifest>(join(dir, "manifest.json"));
    if (!manifest) return null;
    let diskBytes = 0;
    for (const f of IMAGE_FILES) {
      const s = await stat(join(dir, f)).catch(() => null);
      if (!s) return null;
      diskBytes += s.blocks * 512;
    }
    return { template, version, dir, inputsHash: manifest.inputsHash, diskBytes, manifest };
  }

  async list(template: string): Promise<ImageVersion[]> {
    const entries = await readdir(this.templateDir(template), { withFileTypes: true }).catch(() => []);
    const out: ImageVersion[] = [];
    for (const e of entries) {
      if (!e.isDirectory() || e.name.startsWith(".") || !VERSION_RE.test(e.name)) continue;
      const v = await this.get(template, e.name);
      if (v) out.push(v);
    }
    return out.sort((a, b) => a.version.localeCompare(b.version));
  }

  /** The newest complete build of exactly these inputs: builds are cached by input hash. */
  async findByHash(template: string, inputsHash: string): Promise<ImageVersion | null> {
    const all = await this.list(template);
    return all.filter((v) => v.inputsHash === inputsHash).at(-1) ?? null;
  }

  async current(template: string): Promise<ImageVersion | null> {
    const p = await readJson<{ version: string }>(join(this.templateDir(template), "current.json"));
    return p ? this.get(template, p.version) : null;
  }

  /** Moves a finished build directory into place as `version` and makes it current. */
  async commit(template: string, buildDir: string, version: string): Promise<ImageVersion> {
    const dir = this.versionDir(template, version);
    if (await exists(dir))
      throw new ImageError("version_conflict", `image ${template}@${version} already exists`);
    await rename(buildDir, dir);
    const v = await this.get(template, version);
    if (!v) throw new ImageError("build_failed", `build of ${template}@${version} is incomplete`);
    await this.setCurrent(v);
    return v;
  }

  async setCurrent(v: ImageVersion): Promise<void> {
    await writeJsonAtomic(join(this.templateDir(v.template), "current.json"), {
      version: v.version,
      inputsHash: v.inputsHash,
    });
  }

  /**
   * Removes versions that are neither current nor in `inUse` (versions golden builds or
   * boxes back onto: the caller knows them). Returns the removed versions.
   */
  async prune(template: string, inUse: ReadonlySet<string>): Promise<string[]> {
    const current = (await this.current(template))?.version;
    const removed: string[] = [];
    for (const v of await this.list(template)) {
      if (v.version === current || inUse.has(v.version)) continue;
      await rm(v.dir, { recursive: true, force: true });
      removed.push(v.version);
    }
    return removed;
  }

  /** The template's golden snapshot must be rebuilt from `version` before new boxes use it. */
  async markGoldenStale(template: string, version: string, now: Date): Promise<void> {
    await writeJsonAtomic(join(this.templateDir(template), "golden-stale.json"), {
      version,
      since: now.toISOString(),
    });
  }

  /** Call after a golden build of `version` succeeded. */
  async markGoldenFresh(template: string, version: string): Promise<void> {
    const stale = await this.goldenStale(template);
    if (stale && stale.version === version) {
      await writeJsonAtomic(join(this.templateDir(template), "golden-stale.json"), null);
    }
  }

  /** The image version the golden must be rebuilt from, or null when it is up to date. */
  async goldenStale(template: string): Promise<{ version: string; since: string } | null> {
    return readJson(join(this.templateDir(template), "golden-stale.json"));
  }
}

async function exists(path: string): Promise<boolean> {
  return access(path).then(
    () => true,
    () => false,
  );
}

async function readJson<T>(path: string): Promise<T | null> {
  try {
    return JSON.parse(await readFile(path, "utf8")) as T;
  } catch {
    return null;
  }
}

async function writeJsonAtomic(path: string, value: unknown): Promise<void> {
  const tmp = `${path}.tmp`;
  await writeFile(tmp, `${JSON.stringify(value)}\n`);
  await rename(tmp, path);
}
