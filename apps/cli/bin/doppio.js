#!/usr/bin/env node
// The installed package runs the bundle; a repo checkout without a build runs the sources via tsx.
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";

const bundle = new URL("../dist/doppio.mjs", import.meta.url);
if (existsSync(fileURLToPath(bundle))) {
  await import(bundle.href);
} else {
  const { register } = await import("tsx/esm/api");
  register();
  await import(new URL("../src/index.ts", import.meta.url).href);
}
