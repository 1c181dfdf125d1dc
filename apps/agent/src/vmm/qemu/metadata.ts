import { rename, writeFile } from "node:fs/promises";
import { shellAssignments } from "../../metadata/shell.ts";
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
 * The shell form of the metadata (metadata/shell.ts), padded with spaces to
 * SHELL_METADATA_SIZE; padding only when it does not fit, and the guest then parses the
 * JSON blob as before.
 */
export function encodeShellMetadata(meta: BoxMetadata): Buffer {
  const bytes = Buffer.from(shellAssignments(meta), "utf8");
  const out = Buffer.alloc(SHELL_METADATA_SIZE, 0x20);
  if (bytes.length <= SHELL_METADATA_SIZE) bytes.copy(out);
  return out;
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
