import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { REPO } from "./support.ts";

const HELPER = join(REPO, "images/common/rootfs/usr/local/bin/git-credential-doppio");
const LIB = join(REPO, "images/minimal/rootfs/usr/lib/doppio");
const hasBusybox = existsSync("/bin/busybox");
if (!hasBusybox) console.warn("SKIPPING git credential helper test: /bin/busybox missing (busybox-static)");

/**
 * The helper's side of the protocol against a loopback stand-in for the agent's metadata
 * service (apps/agent/test/metadata/ runs it against the real agent and control plane).
 */
describe.skipIf(!hasBusybox)("git-credential-doppio (the box's git credential helper)", () => {
  let server: Server;
  let dir = "";
  let file = "";
  let answer: { status: number; body: unknown } = { status: 404, body: {} };
  const seen: Array<{ method?: string; path: string | undefined; auth: string | undefined }> = [];

  beforeAll(async () => {
    server = createServer((req, res) => {
      seen.push({ path: req.url, auth: req.headers.authorization });
      if (req.method !== "GET") seen.at(-1)!.method = req.method;
      res.writeHead(answer.status, { "content-type": "application/json" });
      res.end(JSON.stringify(answer.body));
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const addr = server.address();
    const port = typeof addr === "object" && addr ? addr.port : 0;
    dir = await mkdtemp(join(tmpdir(), "doppio-gitcred-"));
    file = join(dir, "metadata");
    await writeFile(file, `url=http://127.0.0.1:${port}\ntoken=boot-token_1\n`, { mode: 0o600 });
  });
  afterAll(async () => {
    await new Promise<void>((r) => server.close(() => r()));
    await rm(dir, { recursive: true, force: true });
  });

  const run = (op: string) =>
    new Promise<{ stdout: string; stderr: string }>((resolve, reject) => {
      const child = execFile(
        HELPER,
        [op],
        { env: { PATH: process.env.PATH ?? "", DOPPIO_METADATA_FILE: file, DOPPIO_LIB: LIB } },
        (err, stdout, stderr) => (err ? reject(err) : resolve({ stdout, stderr })),
      );
      child.stdin?.end("protocol=https\nhost=github.com\n\n");
    });

  it("asks /v1/git-credential with the boot's bearer and prints the credential (quotes stay data)", async () => {
    seen.length = 0;
    answer = {
      status: 200,
      body: { username: "x-access-token", token: "ghs_abc'123$(id)", expiresAt: "2030-01-01T00:00:00Z" },
    };
    expect(await run("get")).toEqual({
      stdout: "username=x-access-token\npassword=ghs_abc'123$(id)\n",
      stderr: "",
    });
    expect(seen).toEqual([{ path: "/v1/git-credential", auth: "Bearer boot-token_1" }]);
  });

  it("asks again on every call, so a refreshed token is picked up", async () => {
    answer = { status: 200, body: { username: "octo", token: "ghs_new", expiresAt: "2030-01-01T00:00:00Z" } };
    expect((await run("get")).stdout).toBe("username=octo\npassword=ghs_new\n");
  });

  it("prints only a hint (stderr) on an error answer; store is a no-op, erase drops the agent's copy", async () => {
    answer = { status: 503, body: { error: { code: "unavailable", message: "control plane away" } } };
    expect(await run("get")).toEqual({
      stdout: "",
      stderr: "git-credential-doppio: control plane away; git will prompt\n",
    });
    seen.length = 0;
    expect((await run("store")).stdout).toBe("");
    expect(seen).toEqual([]);
    answer = { status: 204, body: {} };
    expect(await run("erase")).toEqual({ stdout: "", stderr: "" });
    expect(seen).toEqual([{ method: "DELETE", path: "/v1/git-credential", auth: "Bearer boot-token_1" }]);
  });
});
