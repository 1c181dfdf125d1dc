import { createHash } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { GitCredentialSource } from "../../../api/src/services/git-credentials.ts";
import { freePort } from "../../../api/test/support/ports.ts";
import { ASK_BURST } from "../../src/metadata/credentials.ts";
import {
  startAgent,
  startCp,
  type TestAgent,
  type TestCp,
  waitFor,
  waitForBox,
  waitForHeartbeat,
} from "../support/agent-harness.ts";
import { GUEST_LIB, HELPER, MetadataRecordingFake, run, which } from "./support.ts";

const TOKEN = "ghs_installation-token-for-tests";
const HOUR = 3_600_000;

/**
 * The metadata service end to end: a real control plane (PGlite) with an injected
 * credential source, the real agent core (fake VMs) in user-mode networking, so the
 * service listens on 127.0.0.1 where QEMU would send a guest's gateway address.
 */
describe("agent metadata service: Git credentials for boxes", () => {
  let cp: TestCp;
  let a: TestAgent;
  let fake: MetadataRecordingFake;
  let port: number;
  let tmp: string;
  const issued: string[] = [];

  const source: GitCredentialSource = {
    async issue({ box }) {
      issued.push(box.slug);
      if (box.slug === "nocred") return null;
      return {
        username: "x-access-token",
        token: `${TOKEN}-${box.slug}`,
        expiresAt: new Date(Date.now() + HOUR).toISOString(),
      };
    },
  };

  const base = () => `http://127.0.0.1:${port}`;
  const ask = async (token: string | null) => {
    const res = await fetch(`${base()}/v1/git-credential`, {
      headers: token === null ? {} : { authorization: `Bearer ${token}` },
    });
    return { status: res.status, body: (await res.json()) as any };
  };
  const tokenOf = (slug: string) => fake.metadata.get(slug)!.secrets.metadata_token;

  async function createBox(name: string) {
    const res = await cp.admin.post("/api/v1/boxes", { template: "minimal", name });
    expect(res.status).toBe(202);
    await waitForBox(cp, name, "running");
  }

  beforeAll(async () => {
    tmp = await mkdtemp(path.join(tmpdir(), "doppio-metadata-"));
    cp = await startCp();
    cp.env.cp.ctx.gitCredentials = source;
    port = await freePort();
    fake = new MetadataRecordingFake({ golden: { minimal: "ready" } });
    a = await startAgent({
      cpUrl: cp.url,
      token: cp.agentToken,
      listen: true,
      config: { networkMode: "user", metadata: { port } },
      backend: () => ({ executor: fake, network: fake }),
    });
    await waitForHeartbeat(cp);
    await createBox("gitty");
    await createBox("nocred");
  }, 60_000);

  afterAll(async () => {
    await a?.close();
    await cp?.close();
    await rm(tmp, { recursive: true, force: true });
  });

  it("gives each box its gateway URL and a token, and keeps only the token's sha256", () => {
    const meta = fake.metadata.get("gitty")!;
    expect(a.agent.metadata.url).toBe(base());
    expect(meta.metadata_url).toBe(`http://10.0.0.1:${port}`);
    expect(meta.secrets.metadata_token).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(tokenOf("nocred")).not.toBe(meta.secrets.metadata_token);
    const row = a.agent.db.prepare("SELECT * FROM boxes WHERE slug = ?").get("gitty") as Record<
      string,
      unknown
    >;
    expect(row.metadata_token_sha256).toBe(
      createHash("sha256").update(meta.secrets.metadata_token).digest("hex"),
    );
    expect(JSON.stringify(row)).not.toContain(meta.secrets.metadata_token);
  });

  it("refuses a missing or wrong token with 401", async () => {
    expect((await ask(null)).status).toBe(401);
    const wrong = await ask("not-a-token");
    expect(wrong.status).toBe(401);
    expect(wrong.body.error.code).toBe("unauthorized");
  });

  it("answers the box's own credential from the control plane, reusing it until near expiry", async () => {
    issued.length = 0;
    const first = await ask(tokenOf("gitty"));
    expect(first.status).toBe(200);
    expect(first.body).toMatchObject({ username: "x-access-token", token: `${TOKEN}-gitty` });
    expect(Date.parse(first.body.expiresAt)).toBeGreaterThan(Date.now());
    const again = await ask(tokenOf("gitty"));
    expect(again.body).toEqual(first.body);
    expect(issued).toEqual(["gitty"]);
  });

  it("answers 404 with the control plane's reason when there is no credential", async () => {
    const res = await ask(tokenOf("nocred"));
    expect(res.status).toBe(404);
    expect(res.body).toEqual({
      error: { code: "not_found", message: "GitHub is not connected for this box's owner" },
    });
  });

  describe.each([
    ["dash", which("dash")],
    ["busybox sh", which("busybox")],
  ])("the guest's git-credential-doppio under %s", (shellName, shell) => {
    const missing = !shell || !which("curl") || !which("busybox");
    if (missing) {
      console.warn(
        `SKIPPING git-credential-doppio under ${shellName}: needs ${shellName}, curl and busybox on PATH`,
      );
    }
    const helper = async (slug: string | null, request: string, op = "get", githubLine = "") => {
      const file = path.join(tmp, `metadata-${slug ?? "none"}`);
      const meta = slug === null ? "" : `url=${base()}\ntoken=${tokenOf(slug)}\n${githubLine}`;
      await writeFile(file, meta, { mode: 0o600 });
      const [file0, args] = shellName === "dash" ? [shell!, [HELPER, op]] : [shell!, ["sh", HELPER, op]];
      return run(file0, args, request, { DOPPIO_METADATA_FILE: file, DOPPIO_LIB: GUEST_LIB });
    };
    const github = "protocol=https\nhost=github.com\npath=frappe/frappe.git\n\n";

    it.skipIf(missing)("prints username and password for github.com", async () => {
      const r = await helper("gitty", github);
      expect(r).toEqual({
        code: 0,
        stdout: `username=x-access-token\npassword=${TOKEN}-gitty\n`,
        stderr: "",
      });
    });

    it.skipIf(missing)(
      "prints nothing on stdout and one hint on stderr when there is no credential",
      async () => {
        const r = await helper("nocred", github);
        expect(r.code).toBe(0);
        expect(r.stdout).toBe("");
        expect(r.stderr).toBe(
          "git-credential-doppio: GitHub is not connected for this box's owner; git will prompt\n",
        );
      },
    );

    it.skipIf(missing)(
      "falls back to prompting without metadata, and never answers other hosts",
      async () => {
        const none = await helper(null, github);
        expect(none.stdout).toBe("");
        expect(none.stderr).toMatch(/^git-credential-doppio: no metadata service for this box .*\n$/);
        const other = await helper("gitty", "protocol=https\nhost=gitlab.com\n\n");
        expect(other).toEqual({ code: 0, stdout: "", stderr: "" });
        const plain = await helper("gitty", "protocol=http\nhost=github.com\n\n");
        expect(plain.stdout).toBe("");
        const store = await helper("gitty", `${github}username=x\npassword=y\n`, "store");
        expect(store).toEqual({ code: 0, stdout: "", stderr: "" });
      },
    );

    it.skipIf(missing)(
      "answers for the box's GitHub URL from its metadata (GitHub Enterprise Server) and nothing else",
      async () => {
        const ghes = "github=https://ghe.example.com:8443\n";
        const ask = (request: string, line = ghes) => helper("gitty", request, "get", line);
        expect((await ask("protocol=https\nhost=ghe.example.com:8443\npath=o/r.git\n\n")).stdout).toBe(
          `username=x-access-token\npassword=${TOKEN}-gitty\n`,
        );
        for (const other of [
          "protocol=https\nhost=github.com\n\n",
          "protocol=https\nhost=ghe.example.com\n\n",
          "protocol=http\nhost=ghe.example.com:8443\n\n",
          "protocol=https\nhost=ghe.example.com:8444\n\n",
          "protocol=https\nhost=evil.ghe.example.com:8443\n\n",
        ]) {
          expect(await ask(other), other).toEqual({ code: 0, stdout: "", stderr: "" });
        }
        // A hostile or refused github= line (apply writes "" for a refused one): no token for anyone.
        for (const bad of ["github=\n", "github=https://github.com/x\n", "github=https://$(id)\n"]) {
          const r = await ask("protocol=https\nhost=github.com\n\n", bad);
          expect(r.stdout, bad).toBe("");
          expect(r.stderr, bad).toBe("git-credential-doppio: this box has no valid GitHub URL\n");
        }
      },
    );
  });

  const hasGit = which("git") !== null && which("curl") !== null && which("busybox") !== null;
  if (!hasGit)
    console.warn("SKIPPING git credential fill through git-credential-doppio: needs git, curl and busybox");
  it.skipIf(!hasGit)(
    "works as git's helper: git fills the credential, or prompts (here: fails) without one",
    async () => {
      const fill = async (slug: string) => {
        const file = path.join(tmp, `git-metadata-${slug}`);
        await writeFile(file, `url=${base()}\ntoken=${tokenOf(slug)}\n`, { mode: 0o600 });
        return run(
          "git",
          [
            "-c",
            "credential.helper=",
            "-c",
            `credential.https://github.com.helper=!sh ${HELPER}`,
            "credential",
            "fill",
          ],
          "protocol=https\nhost=github.com\n\n",
          {
            HOME: tmp,
            GIT_CONFIG_NOSYSTEM: "1",
            GIT_TERMINAL_PROMPT: "0",
            DOPPIO_METADATA_FILE: file,
            DOPPIO_LIB: GUEST_LIB,
          },
        );
      };
      const ok = await fill("gitty");
      expect(ok.code).toBe(0);
      expect(ok.stdout).toBe(
        `protocol=https\nhost=github.com\nusername=x-access-token\npassword=${TOKEN}-gitty\n`,
      );
      const none = await fill("nocred");
      expect(none.code).not.toBe(0);
      expect(none.stdout).toBe("");
      expect(none.stderr).toContain("git-credential-doppio: GitHub is not connected for this box's owner");
      expect(none.stderr).toMatch(/terminal prompts disabled/);
    },
  );

  it("gives a restarted box a new token; the old one stops working", async () => {
    const old = tokenOf("gitty");
    expect((await cp.admin.post("/api/v1/boxes/gitty/stop")).status).toBe(202);
    await waitForBox(cp, "gitty", "stopped");
    expect((await cp.admin.post("/api/v1/boxes/gitty/start")).status).toBe(202);
    await waitForBox(cp, "gitty", "running");
    expect(tokenOf("gitty")).not.toBe(old);
    expect((await ask(old)).status).toBe(401);
    expect((await ask(tokenOf("gitty"))).status).toBe(200);
  });

  it("holds a box asking in a loop on its host: 429 with Retry-After, which its helper prints; other boxes are served", async () => {
    await createBox("looper");
    issued.length = 0;
    const token = tokenOf("looper");
    const statuses: number[] = [];
    let refused: Response | undefined;
    for (let i = 0; i < ASK_BURST + 3; i++) {
      const res = await fetch(`${base()}/v1/git-credential`, {
        headers: { authorization: `Bearer ${token}` },
      });
      statuses.push(res.status);
      if (res.status === 429) refused ??= res;
      else await res.body?.cancel();
      // Its `git credential erase`, so that the next ask is not answered from the cache.
      await fetch(`${base()}/v1/git-credential`, {
        method: "DELETE",
        headers: { authorization: `Bearer ${token}` },
      });
    }
    expect(statuses).toEqual([...Array(ASK_BURST).fill(200), 429, 429, 429]);
    expect(issued).toEqual(Array(ASK_BURST).fill("looper"));
    expect(refused!.headers.get("retry-after")).toMatch(/^(9|10)$/);
    expect(await refused!.json()).toEqual({
      error: {
        code: "rate_limited",
        message: expect.stringMatching(
          /^this box asked for Git credentials too often; try again in (9|10) s$/,
        ),
      },
    });
    const other = await ask(tokenOf("nocred"));
    expect(other.status).toBe(404);

    if (!which("curl") || !which("busybox")) {
      console.warn("SKIPPING the helper's words on a refusal: needs curl and busybox on PATH");
      return;
    }
    const file = path.join(tmp, "metadata-looper");
    await writeFile(file, `url=${base()}\ntoken=${token}\n`, { mode: 0o600 });
    const r = await run("sh", [HELPER, "get"], "protocol=https\nhost=github.com\n\n", {
      DOPPIO_METADATA_FILE: file,
      DOPPIO_LIB: GUEST_LIB,
    });
    expect(r.stdout).toBe("");
    expect(r.stderr).toMatch(
      /^git-credential-doppio: this box asked for Git credentials too often; try again in (9|10) s; git will prompt\n$/,
    );
  });

  it("forgets a deleted box's token", async () => {
    const token = tokenOf("gitty");
    expect((await ask(token)).status).toBe(200);
    expect((await cp.admin.del("/api/v1/boxes/gitty")).status).toBe(202);
    await waitFor("gitty gone from the agent", () => a.agent.boxes.get("gitty") === null);
    const res = await ask(token);
    expect(res.status).toBe(401);
  });
});
