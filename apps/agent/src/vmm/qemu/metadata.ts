import { rename, writeFile } from "node:fs/promises";
import { type BoxMetadata, METADATA_SIZE } from "../executor.ts";
import { QemuError } from "./errors.ts";

/**
 * The fw_cfg blob: compact JSON with `generation` first (the guest polls only the first
 * bytes), padded with spaces to METADATA_SIZE because the guest keeps the entry size it
 * saw at module load, including across a restore.
 */
export function encodeMetadata(meta: BoxMetadata): Buffer {
  const { generation, ...rest } = meta;
  const json = JSON.stringify({ generation, ...rest });
  const bytes = Buffer.from(json, "utf8");
  if (bytes.length > METADATA_SIZE) {
    throw new QemuError("invalid_spec", `metadata is ${bytes.length} bytes, more than ${METADATA_SIZE}`);
  }
  const out = Buffer.alloc(METADATA_SIZE, 0x20);
  bytes.copy(out);
  return out;
}

/**
 * Size of the second fw_cfg blob, the same metadata as shell assignments. One page: the
 * guest's fw_cfg driver reads byte by byte through an I/O port and skips to each page of a
 * read byte by byte too, so a larger blob costs the guest far more than its size.
 */
export const SHELL_METADATA_SIZE = 4096;

/** The shell blob's file: beside the JSON one, so every launch that passes one passes both. */
export function shellMetadataPath(metaFile: string): string {
  return `${metaFile}.sh`;
}

/**
 * The metadata as the shell assignments images/minimal's json.awk makes from the JSON,
 * for the guest to source instead of parsing JSON on a clone's path to READY (an awk run
 * is its slowest step under TCG): `M_<path>='value'` for each scalar outside `env` (path
 * parts joined with `_`, non-alphanumerics as `_`, arrays by index), `generation` first,
 * and `M_env_file`: the text of /etc/profile.d/doppio.sh (`export NAME='value'` for each
 * env variable with a shell-safe name). Every value is single-quoted; NUL, which no
 * shell string can hold, becomes `?` as json.awk does. Padded with spaces to
 * SHELL_METADATA_SIZE; when the assignments do not fit it is padding only, and the guest
 * parses the JSON blob as before.
 */
export function encodeShellMetadata(meta: BoxMetadata): Buffer {
  const { generation, env, ...rest } = meta;
  const lines: string[] = [];
  const walk = (path: string, value: unknown): void => {
    if (value !== null && typeof value === "object") {
      for (const [k, v] of Object.entries(value)) walk(path ? `${path}.${k}` : k, v);
      return;
    }
    const text = typeof value === "string" ? value : JSON.stringify(value);
    lines.push(`M_${path.replace(/[^A-Za-z0-9]/g, "_")}=${shellQuote(text)}`);
  };
  walk("", { generation, ...rest });
  const envFile = Object.entries(env)
    .filter(([k]) => /^[A-Za-z_][A-Za-z0-9_]*$/.test(k))
    .map(([k, v]) => `export ${k}=${shellQuote(v)}\n`)
    .join("");
  lines.push(`M_env_file=${shellQuote(envFile)}`);
  const bytes = Buffer.from(`${lines.join("\n")}\n`, "utf8");
  const out = Buffer.alloc(SHELL_METADATA_SIZE, 0x20);
  if (bytes.length <= SHELL_METADATA_SIZE) bytes.copy(out);
  return out;
}

function shellQuote(v: string): string {
  return `'${v.replaceAll("\0", "?").replaceAll("'", "'\\''")}'`;
}

/** Both fw_cfg blobs of `meta`, each written whole (a temporary file renamed into place). */
export async function writeMetadataFile(path: string, meta: BoxMetadata): Promise<void> {
  const write = async (file: string, data: Buffer) => {
    const tmp = `${file}.tmp`;
    await writeFile(tmp, data, { mode: 0o600 });
    await rename(tmp, file);
  };
  await Promise.all([
    write(path, encodeMetadata(meta)),
    write(shellMetadataPath(path), encodeShellMetadata(meta)),
  ]);
}
