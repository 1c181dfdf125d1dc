import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { sql } from "drizzle-orm";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HostImageBuilder } from "../src/images/builder.ts";
import { ImageStore } from "../src/images/store.ts";
import {
  API_TOKEN,
  startAgent,
  startCp,
  type TestAgent,
  type TestCp,
  waitFor,
  waitForBox,
  waitForHeartbeat,
} from "./support/agent-harness.ts";

// The `code` recipe's interface (hash-only pass, STEP lines, OUT_DIR files, inputs hash) in
// a few milliseconds; its inputs are whatever the test writes to <repo>/input.
const STAND_IN_RECIPE = `#!/usr/bin/env bash
set -euo pipefail
input=$(cat "$(dirname "$0")/../../input")
hash=$(printf '%s' "$input" | sha256sum | cut -d' ' -f1)
[ "\${5:-}" = "--hash-only" ] && { echo "$hash"; exit 0; }
[ "$input" = "refuse" ] && { echo "toolchain: this branch needs Python < 3.11" >&2; exit 4; }
echo "STEP build_rootfs"
echo "STEP write_image"
mkdir -p "$2"
for f in vmlinuz initrd.img rootfs.qcow2; do head -c 4096 /dev/urandom > "$2/$f"; done
echo "{\\"template\\":\\"$1\\",\\"inputsHash\\":\\"$hash\\",\\"builtAt\\":\\"x\\"}" > "$2/manifest.json"
echo "$hash" > "$2/.inputs-hash"
`;

interface CpJob {
  status: string;
  error: string | null;
  errorCode: string | null;
  result: Record<string, unknown> | null;
  steps: Array<{ name: string; status: string }>;
}

describe("build_image: a new image stales the golden, and the same job rebuilds it", () => {
  let cp: TestCp;
  let a: TestAgent;
  let store: ImageStore;
  const repo = mkdtempSync(join(tmpdir(), "dbx-recipes-"));

  const cpJob = async (id: string): Promise<CpJob> => {
    const res = await cp.env.cp.ctx.db.execute(
      sql`SELECT status, error, error_code AS "errorCode", result, steps FROM agent_jobs WHERE id = ${id}`,
    );
    return (res as unknown as { rows: CpJob[] }).rows[0]!;
  };
  const finished = (id: string) =>
    waitFor(`job ${id} finished`, async () => {
      const j = await cpJob(id);
      return j.status === "succeeded" || j.status === "failed" ? j : null;
    });
  const enqueue = async (path: "images" | "golden", template = "code"): Promise<string> => {
    const res = await cp.admin.post(`/api/v1/servers/${cp.serverName}/${path}`, { template });
    expect(res.status).toBe(202);
    return res.body.id;
  };
  const cpGolden = async () => (await cp.admin.get(`/api/v1/servers/${cp.serverName}`)).body.golden.code;
  const cpGoldenIs = (status: string) =>
    waitFor(`control plane to see the code golden ${status}`, async () =>
      (await cpGolden())?.status === status ? cpGolden() : null,
    );
  const agentGolden = async () => {
    const res = await fetch(`${a.apiUrl}/golden-snapshot/status`, {
      headers: { authorization: `Bearer ${API_TOKEN}` },
    });
    return ((await res.json()) as { templates: Record<string, unknown> }).templates.code;
  };

  beforeAll(async () => {
    mkdirSync(join(repo, "images", "common"), { recursive: true });
    writeFileSync(join(repo, "images", "common", "build-debian.sh"), STAND_IN_RECIPE);
    chmodSync(join(repo, "images", "common", "build-debian.sh"), 0o755);
    cp = await startCp();
    a = await startAgent({
      cpUrl: cp.url,
      token: cp.agentToken,
      listen: true,
      config: {
        templates: [
          { name: "minimal", readyPorts: [8000, 8888], memoryMb: 256 },
          { name: "code", readyPorts: [8888], memoryMb: 1536, vcpu: 2 },
          { name: "frappe" },
        ],
      },
      fake: { golden: { minimal: "ready", code: "ready" } },
      images: (dataDir) => {
        store = new ImageStore(join(dataDir, "images"));
        const log = pino({ level: "silent" });
        return { store, builder: new HostImageBuilder({ repoDir: repo, store, log }) };
      },
    });
    await waitForHeartbeat(cp);
    await cpGoldenIs("ready");
  });
  afterAll(async () => {
    await a?.close();
    await cp?.close();
    rmSync(repo, { recursive: true, force: true });
  });

  it("reports stale after the image build, rebuilds the golden from the new image, then ready", async () => {
    await cp.admin.post("/api/v1/boxes", { template: "code", name: "keeper" });
    await waitForBox(cp, "keeper", "running");

    let release!: () => void;
    a.fake.goldenGate = new Promise<void>((r) => {
      release = r;
    });
    writeFileSync(join(repo, "input"), "one");
    const id = await enqueue("images");

    // The image is current, the golden (from the template's legacy image "1") is not.
    expect(await cpGoldenIs("stale")).toEqual({ status: "stale", version: "1" });
    const current = (await store.current("code"))!.version;
    expect(current).toMatch(/^\d{8}T\d{6}-[0-9a-f]{12}$/);
    expect(await agentGolden()).toMatchObject({ status: "stale", version: "1", imageVersion: "1" });
    const refused = await cp.admin.post("/api/v1/boxes", { template: "code", name: "refused" });
    expect(refused.body.error.code).toBe("no_capacity");
    expect(refused.body.error.details.reasons).toEqual([`${cp.serverName}: template not ready`]);

    release();
    a.fake.goldenGate = null;
    const job = await finished(id);
    expect(job.error).toBeNull();
    expect(job.status).toBe("succeeded");
    expect(job.result).toMatchObject({
      template: "code",
      imageVersion: current,
      cached: false,
      goldenRebuilt: true,
      golden: { status: "ready", version: "1", imageVersion: current },
      goldenStale: false,
    });
    const names = job.steps.map((s) => s.name);
    expect(names.indexOf("write_image")).toBeGreaterThanOrEqual(0);
    expect(names.indexOf("snapshot_vm")).toBeGreaterThan(names.indexOf("write_image"));
    expect(job.steps.every((s) => s.status === "succeeded")).toBe(true);

    expect(await cpGoldenIs("ready")).toEqual({ status: "ready", version: "1" });
    expect(await agentGolden()).toMatchObject({ status: "ready", imageVersion: current });
    expect(await store.goldenStale("code")).toBeNull();
    // The box restored before keeps running on its golden build; new boxes are placed again.
    expect(a.fake.vm("keeper")?.state).toBe("running");
    expect(a.fake.calls.filter((c) => c.slug === "keeper").map((c) => c.method)).toEqual([
      "createFromGolden",
    ]);
    await cp.admin.post("/api/v1/boxes", { template: "code", name: "fresh" });
    await waitForBox(cp, "fresh", "running");
  });

  it("a cached build whose golden is fresh rebuilds nothing", async () => {
    const current = (await store.current("code"))!.version;
    const goldenBuilds = a.fake.calls.filter((c) => c.method === "buildGolden").length;
    const job = await finished(await enqueue("images"));
    expect(job.status).toBe("succeeded");
    expect(job.result).toMatchObject({
      imageVersion: current,
      cached: true,
      goldenRebuilt: false,
      golden: { status: "ready", imageVersion: current },
    });
    expect(job.steps).toEqual([]);
    expect(a.fake.calls.filter((c) => c.method === "buildGolden").length).toBe(goldenBuilds);
    expect((await cpGolden()).status).toBe("ready");
  });

  it("a failed golden rebuild fails the job and leaves the template stale until a golden build", async () => {
    const before = (await store.current("code"))!.version;
    writeFileSync(join(repo, "input"), "two");
    a.fake.goldenFailures.push({ template: "code", message: "guest never answered on :8888" });
    const job = await finished(await enqueue("images"));
    const current = (await store.current("code"))!.version;
    expect(current).not.toBe(before);
    expect(job.status).toBe("failed");
    expect(job.error).toBe(
      `image code@${current} was built, but rebuilding the golden snapshot from it failed (the template stays stale on this host): guest never answered on :8888`,
    );
    expect(job.steps.find((s) => s.name === "snapshot_vm")?.status).toBe("failed");
    expect(await cpGoldenIs("stale")).toEqual({ status: "stale", version: "1" });
    // The previous build stays in use (running boxes back onto it), and stays reported stale.
    expect(await a.fake.goldenStatus("code")).toMatchObject({ status: "ready", imageVersion: before });
    expect(await store.goldenStale("code")).toMatchObject({ version: current });
    expect(a.fake.vm("keeper")?.state).toBe("running");

    // A build_golden job builds from the current image and marks it fresh.
    const golden = await finished(await enqueue("golden"));
    expect(golden.status).toBe("succeeded");
    expect(golden.result).toMatchObject({ status: "ready", version: "1", imageVersion: current });
    expect(await cpGoldenIs("ready")).toEqual({ status: "ready", version: "1" });
    expect(await store.goldenStale("code")).toBeNull();
  });

  it("the first image of a template without a golden builds the golden in the same job", async () => {
    expect((await cp.admin.get(`/api/v1/servers/${cp.serverName}`)).body.golden.frappe).toMatchObject({
      status: "missing",
    });
    writeFileSync(join(repo, "input"), "frappe-one");
    const job = await finished(await enqueue("images", "frappe"));
    expect(job.error).toBeNull();
    const current = (await store.current("frappe"))!.version;
    expect(job.result).toMatchObject({
      template: "frappe",
      goldenRebuilt: true,
      golden: { status: "ready", imageVersion: current },
    });
    await waitFor("the control plane to see frappe ready", async () => {
      const g = (await cp.admin.get(`/api/v1/servers/${cp.serverName}`)).body.golden.frappe;
      return g?.status === "ready";
    });
  });

  it("a recipe that refuses its toolchain fails the job with the image builder's code", async () => {
    const before = (await store.current("code"))!.version;
    writeFileSync(join(repo, "input"), "refuse");
    const job = await finished(await enqueue("images"));
    expect(job).toMatchObject({
      status: "failed",
      errorCode: "toolchain_unsupported",
      error: "toolchain: this branch needs Python < 3.11",
    });
    expect((await store.current("code"))!.version).toBe(before);
  });
});
