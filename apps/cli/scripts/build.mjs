#!/usr/bin/env node
// Bundles the CLI (sources, @doppio/contracts, @doppio/sdk, commander, zod) into one ESM file, so the
// installed package needs no dependencies and no TypeScript runtime.
import { rename } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const root = fileURLToPath(new URL("..", import.meta.url));
const outfile = `${root}dist/doppio.mjs`;
const tmp = `${outfile}.${process.pid}.tmp`;

await build({
  entryPoints: [`${root}src/index.ts`],
  bundle: true,
  platform: "node",
  target: "node20",
  format: "esm",
  outfile: tmp,
  legalComments: "linked",
  // commander is CommonJS: give its require() calls of node builtins a real require.
  banner: {
    js: "import { createRequire as __doppioRequire } from 'node:module'; const require = __doppioRequire(import.meta.url);",
  },
  logLevel: "warning",
});
// Atomic, so test files building in parallel never run a half-written bundle.
await rename(tmp, outfile);
console.log(`built ${outfile}`);
