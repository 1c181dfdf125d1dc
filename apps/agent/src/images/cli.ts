// Operator entry point: builds a template image into an images directory the way the
// agent's build_image does, printing steps and the recipe's output.
//   npx tsx apps/agent/src/images/cli.ts code --images-dir /var/lib/doppio/images [--size 3G]
import { parseArgs } from "node:util";
import { findTemplate, type StepName, TEMPLATES } from "@doppio/contracts";
import { pino } from "pino";
import type { StepReporter } from "../vmm/executor.ts";
import { buildImage, REPO_DIR } from "./builder.ts";
import { ImageStore } from "./store.ts";

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { "images-dir": { type: "string" }, size: { type: "string" }, version: { type: "string" } },
});
const name = positionals[0];
const t = name ? findTemplate(name) : undefined;
if (!t || !values["images-dir"]) {
  process.stderr.write(
    `usage: cli.ts TEMPLATE --images-dir DIR [--size SIZE] [--version NAME]\ntemplates: ${TEMPLATES.map((x) => x.name).join(", ")}\n`,
  );
  process.exit(2);
}
const report: StepReporter = {
  async step<T>(step: StepName, fn: () => Promise<T>): Promise<T> {
    const t0 = Date.now();
    process.stdout.write(`== ${step}\n`);
    const out = await fn();
    process.stdout.write(`== ${step} done in ${Date.now() - t0} ms\n`);
    return out;
  },
  log(line: string) {
    process.stdout.write(`   ${line}\n`);
  },
};
try {
  const r = await buildImage(t, report, {
    repoDir: REPO_DIR,
    store: new ImageStore(values["images-dir"]),
    log: pino({ level: "info" }),
    ...(values.size ? { size: values.size } : {}),
    ...(values.version ? { version: values.version } : {}),
  });
  process.stdout.write(`${JSON.stringify(r)}\n`);
} catch (err) {
  process.stderr.write(`build of ${t.name} failed: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
}
