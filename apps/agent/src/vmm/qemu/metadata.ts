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

export async function writeMetadataFile(path: string, meta: BoxMetadata): Promise<void> {
  const tmp = `${path}.tmp`;
  await writeFile(tmp, encodeMetadata(meta), { mode: 0o600 });
  await rename(tmp, path);
}
