import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { REPO } from "./support.ts";

const HELPER = join(REPO, "images/common/rootfs/usr/local/bin/git-credential-doppio");
const LIB = join(REPO, "images/minimal/rootfs/usr/lib/doppio");
const hasBusybox = existsSync("/bin/busybox");
if (!hasBusybox) console.warn("SKIPPING git credential helper test: /bin/busybox missing (busybox-static)");

describe.skipIf(!hasBusybox)("git-credential-doppio (the box's git credential helper)", () => {
  let server: Server;
  let url = "";
  let meta: Record<string, unknown> = {};

  beforeAll(async () => {
    // Stands in for the metadata service: the helper reads the box metadata fresh per call.
    server = createServer((_req, res) => {
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify(meta));
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const addr = server.address();
    url = `http://127.0.0.1:${typeof addr === "object" && addr ? addr.port : 0}/`;
  });
  afterAll(() => new Promise<void>((r) => server.close(() => r())));

  const run = (op: string) =>
    new Promise<string>((resolve, reject) => {
      const child = execFile(
        HELPER,
        [op],
        { env: { PATH: process.env.PATH ?? "", DOPPIO_METADATA_URL: url, DOPPIO_LIB: LIB } },
        (err, stdout) => (err ? reject(err) : resolve(stdout)),
      );
      child.stdin?.end("protocol=https\nhost=github.com\n\n");
    });

  it("answers get with the metadata's short-lived token", async () => {
    meta = { generation: 3, slug: "b1", env: { X: "1" }, git_token: "ghs_abc'123" };
    expect(await run("get")).toBe("username=x-access-token\npassword=ghs_abc'123\n");
  });

  it("picks up a refreshed token and a username on the next call", async () => {
    meta = { generation: 3, slug: "b1", git_token: "ghs_new", git_username: "octo" };
    expect(await run("get")).toBe("username=octo\npassword=ghs_new\n");
  });

  it("says nothing without a token, and ignores store/erase", async () => {
    meta = { generation: 3, slug: "b1" };
    expect(await run("get")).toBe("");
    meta = { generation: 3, git_token: "t" };
    expect(await run("store")).toBe("");
    expect(await run("erase")).toBe("");
  });
});
