import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { findTemplate, type TemplateDescriptor } from "@doppio/contracts";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildImage } from "../../src/images/builder.ts";
import { ImageStore } from "../../src/images/store.ts";
import { RecordingReporter } from "../qemu/support.ts";

// A recipe that records the environment it gets, directly and inside a chroot (root only:
// chroot needs it; recipes enter their rootfs the same way), then builds a stand-in image.
const DUMP_RECIPE = `#!/usr/bin/env bash
set -euo pipefail
out=$2
[ "\${5:-}" = "--hash-only" ] && { echo "env-dump-hash"; exit 0; }
echo "STEP write_image"
mkdir -p "$out"
env > "$out/env.txt"
if [ "$(id -u)" = 0 ]; then chroot / /usr/bin/env > "$out/chroot-env.txt"; fi
for f in vmlinuz initrd.img rootfs.qcow2; do head -c 4096 /dev/urandom > "$out/$f"; done
echo '{"template":"'"$1"'","inputsHash":"env-dump-hash","builtAt":"x"}' > "$out/manifest.json"
echo env-dump-hash > "$out/.inputs-hash"
`;

const SECRETS = {
  DOPPIO_AGENT_SERVER_TOKEN: "dpa_server-token-must-not-leak",
  DOPPIO_AGENT_API_TOKEN: "agent-api-token-must-not-leak",
  AWS_SECRET_ACCESS_KEY: "some-other-secret-in-the-unit-file",
  npm_config__authToken: "npm-auth-must-not-leak",
};
const ALLOWED = { https_proxy: "http://proxy.test:3128", npm_config_cache: "/var/cache/npm-test" };

describe("image builds run with a scrubbed environment", () => {
  let repo: string;
  const saved = new Map<string, string | undefined>();

  beforeAll(() => {
    repo = mkdtempSync(join(tmpdir(), "dbx-img-env-"));
    writeFileSync(join(repo, "dump.sh"), DUMP_RECIPE);
    chmodSync(join(repo, "dump.sh"), 0o755);
    mkdirSync(join(repo, "images"));
    for (const [k, v] of Object.entries({ ...SECRETS, ...ALLOWED })) {
      saved.set(k, process.env[k]);
      process.env[k] = v;
    }
  });
  afterAll(() => {
    for (const [k, v] of saved) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
    rmSync(repo, { recursive: true, force: true });
  });

  it("a recipe and its chroot see the allow-list and the caller's extras, never the agent's tokens", async () => {
    const t: TemplateDescriptor = { ...findTemplate("code")!, recipe: { kind: "debian", script: "dump.sh" } };
    const store = new ImageStore(join(repo, "images"));
    const r = await buildImage(t, new RecordingReporter(), {
      repoDir: repo,
      store,
      log: pino({ level: "silent" }),
      env: { DOPPIO_IMAGE_CACHE: "/var/cache/doppio-test" },
    });
    const dumps = [join(store.versionDir("code", r.version), "env.txt")];
    if (process.getuid?.() === 0) dumps.push(join(store.versionDir("code", r.version), "chroot-env.txt"));
    else console.warn("not root: the chroot half of this test is not checked");
    for (const file of dumps) {
      const env = readFileSync(file, "utf8");
      for (const [k, v] of Object.entries(SECRETS)) {
        expect(env, `${k} in ${file}`).not.toContain(k);
        expect(env, `${k}'s value in ${file}`).not.toContain(v);
      }
      for (const [k, v] of Object.entries(ALLOWED)) expect(env).toContain(`${k}=${v}`);
      expect(env).toContain("DOPPIO_IMAGE_CACHE=/var/cache/doppio-test");
      expect(env).toMatch(/^PATH=.*\/usr\/bin/m);
    }
  });
});
