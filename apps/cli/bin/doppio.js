#!/usr/bin/env node
// An installed package runs the bundle. In a repo checkout the bundle runs only while it is
// newer than every source file; otherwise the sources run through tsx, so a stale build
// never hides a change.
import { existsSync, readdirSync, statSync } from "node:fs";
import { fileURLToPath } from "node:url";

const bundle = fileURLToPath(new URL("../dist/doppio.mjs", import.meta.url));
const src = fileURLToPath(new URL("../src/", import.meta.url));
// The bundle also holds the shared contracts; in a checkout they sit next to the CLI.
const contracts = fileURLToPath(new URL("../../../packages/contracts/src/", import.meta.url));

function bundleIsCurrent() {
  if (!existsSync(bundle)) return false;
  if (!existsSync(src)) return true;
  const built = statSync(bundle).mtimeMs;
  const sources = [src, contracts]
    .filter((dir) => existsSync(dir))
    .flatMap((dir) => readdirSync(dir, { recursive: true }).map((f) => `${dir}${f}`));
  return sources.every((f) => statSync(f).mtimeMs <= built);
}

if (bundleIsCurrent()) {
  await import(new URL("../dist/doppio.mjs", import.meta.url).href);
} else {
  const { register } = await import("tsx/esm/api");
  register();
  await import(new URL("../src/index.ts", import.meta.url).href);
}
