import { execFile } from "node:child_process";
import { mkdtemp, rm, utimes, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { FastifyInstance } from "fastify";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BoxActivity } from "../../src/edge/activity.ts";
import { buildMetadataService } from "../../src/metadata/service.ts";
import { tokenSha256 } from "../../src/metadata/tokens.ts";
import type { StoredBox } from "../../src/store/boxes.ts";
import { REPO } from "./support.ts";

const SCRIPT = join(REPO, "images/common/rootfs/usr/lib/doppio/heartbeat");
const TOKEN = "boot-token_heartbeat";
const box: StoredBox = {
  slug: "beating",
  desiredState: "running",
  spec: {
    template: "code",
    templateVersion: "1",
    vcpu: 1,
    memoryMb: 256,
    diskGb: 1,
    env: {},
    owner: "u1",
    sitePublic: true,
    secrets: { machine_id: "m", seed: "s", db_password: "d", encryption_key: "e", admin_password: "a" },
  },
  ip: "127.0.0.1",
  mac: "06:00:7f:00:00:01",
  tap: null,
  generation: 1,
  updatedAt: new Date(0).toISOString(),
};

/**
 * The guest's heartbeat script (common images) against the agent's real metadata service:
 * a used terminal makes it post `/v1/activity` with the boot's bearer, which marks the box
 * active; an idle look posts nothing; another token is refused.
 */
describe("guest heartbeat → metadata service → box activity", () => {
  let app: FastifyInstance;
  let dir = "";
  let pts = "";
  let url = "";
  const activity = new BoxActivity(() => Date.now());

  beforeAll(async () => {
    app = await buildMetadataService({
      boxes: {
        byMetadataToken: (sha) => (sha === tokenSha256(TOKEN) ? box : null),
      },
      credentials: { get: async () => ({ unavailable: "none" }), forget: () => false },
      checkSourceAddress: false,
      activity,
      log: pino({ level: "silent" }),
    });
    url = await app.listen({ host: "127.0.0.1", port: 0 });
    dir = await mkdtemp(join(tmpdir(), "doppio-heartbeat-"));
    pts = join(dir, "pts");
    await writeFile(pts, "");
  });
  afterAll(async () => {
    await app?.close();
    await rm(dir, { recursive: true, force: true });
  });

  const look = async (token: string, touchTerminal: boolean) => {
    const file = join(dir, "metadata");
    await writeFile(file, `url=${url}\ntoken=${token}\n`, { mode: 0o600 });
    const run = new Promise<number>((resolve) => {
      execFile(
        SCRIPT,
        ["--once"],
        {
          env: {
            PATH: process.env.PATH ?? "",
            DOPPIO_METADATA_FILE: file,
            DOPPIO_PTS_DIR: dir,
            DOPPIO_HEARTBEAT_SECONDS: "1",
            // CPU use never counts here: the test host's load is not the box's.
            DOPPIO_HEARTBEAT_BUSY: "101",
          },
        },
        (err) => resolve(err ? Number((err as { code?: number }).code ?? 99) : 0),
      );
    });
    if (touchTerminal) {
      await new Promise((r) => setTimeout(r, 300));
      const t = new Date();
      await utimes(pts, t, t);
    }
    return run;
  };

  it("a used terminal: posts with the boot's bearer and the box counts as active", async () => {
    expect(activity.lastActiveAt("beating")).toBeNull();
    expect(await look(TOKEN, true)).toBe(0);
    expect(activity.lastActiveAt("beating")).not.toBeNull();
  });

  it("nothing used: nothing posted", async () => {
    activity.forget("beating");
    expect(await look(TOKEN, false)).toBe(1);
    expect(activity.lastActiveAt("beating")).toBeNull();
  });

  it("a token that is not this boot's is refused and marks nothing", async () => {
    expect(await look("someone-elses-token", true)).toBe(2);
    expect(activity.lastActiveAt("beating")).toBeNull();
  });
});
