import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { parseBoxHost } from "@doppio/contracts";
import { afterAll, describe, expect, it } from "vitest";
import { loadOrCreateCookieKey, safeNext } from "../../src/edge/access.ts";
import {
  buildEdgeConfig,
  canonicalJson,
  type EdgeConfigOptions,
  tlsConfig,
} from "../../src/edge/caddy-config.ts";
import { EdgeError } from "../../src/edge/errors.ts";
import { findCaddy } from "../support/caddy.ts";

const D = "fc-01.doppiobox.cloud";

describe("parseBoxHost", () => {
  it("recognises the four URL shapes", () => {
    expect(parseBoxHost(`mybox.site.${D}`, D)).toEqual({ kind: "site", slug: "mybox" });
    expect(parseBoxHost(`MyBox.Code.${D.toUpperCase()}:443`, D)).toEqual({ kind: "code", slug: "mybox" });
    expect(parseBoxHost(`8081-brisk-falcon-3f9a.code.${D}.`, D)).toEqual({
      kind: "dev",
      slug: "brisk-falcon-3f9a",
      port: 8081,
    });
  });

  it("rejects everything else", () => {
    for (const host of [
      D,
      `site.${D}`,
      `a.b.site.${D}`,
      `8081-mybox.site.${D}`, // dev ports live under .code only
      `0-mybox.code.${D}`,
      `08081-mybox.code.${D}`,
      `70000-mybox.code.${D}`,
      `1mybox.code.${D}`,
      `my--box.code.${D}`,
      `mybox.code.${D}.evil.com`,
      `mybox.code.evil-${D}`,
      "[::1]:80",
      "",
    ]) {
      expect(parseBoxHost(host, D), host).toBeNull();
    }
  });
});

describe("safeNext", () => {
  it("keeps same-host paths and drops anything a browser could treat as another origin", () => {
    expect(safeNext("/a/b?c=1#d")).toBe("/a/b?c=1#d");
    expect(safeNext("/")).toBe("/");
    for (const bad of [
      null,
      "",
      "a",
      "//evil.com",
      "///evil.com",
      "/\\evil.com",
      "https://evil.com",
      "/x\r\nSet-Cookie: a=b",
      "/__doppio/auth?token=x",
    ]) {
      expect(safeNext(bad), String(bad)).toBe("/");
    }
  });
});

describe("edge cookie key", () => {
  const dirs: string[] = [];
  afterAll(async () => {
    for (const d of dirs) await rm(d, { recursive: true, force: true });
  });

  it("is created once (0600) and reused across agent restarts; a damaged file is an error", async () => {
    const dir = await mkdtemp(join(tmpdir(), "doppio-key-"));
    dirs.push(dir);
    const a = await loadOrCreateCookieKey(dir);
    const b = await loadOrCreateCookieKey(dir);
    expect(a.export().equals(b.export())).toBe(true);
    expect((await stat(join(dir, "edge-cookie.key"))).mode & 0o777).toBe(0o600);
    expect((await readFile(join(dir, "edge-cookie.key"), "utf8")).length).toBeGreaterThan(40);
    await writeFile(join(dir, "edge-cookie.key"), "short");
    const err = await loadOrCreateCookieKey(dir).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(EdgeError);
    expect((err as EdgeError).code).toBe("bad_key_file");
  });
});

const base: Omit<EdgeConfigOptions, "tls"> = {
  domain: D,
  adminListen: "127.0.0.1:2019",
  agentDial: "127.0.0.1:8090",
};

describe("tlsConfig", () => {
  it("local mode: plain HTTP on the given address, automatic HTTPS off, no tls app", () => {
    expect(tlsConfig({ ...base, tls: { mode: "http", listen: "127.0.0.1:8080" } })).toEqual({
      listen: ["127.0.0.1:8080"],
      automaticHttps: { disable: true },
    });
  });

  it("with a Cloudflare token: wildcard certs by DNS-01, on-demand as fallback gated by /tls/ask", () => {
    const t = tlsConfig({
      ...base,
      tls: { mode: "https", cloudflareApiToken: "cf-token", acmeEmail: "ops@x.test" },
    });
    const auto = (t.tls as { automation: { policies: Record<string, unknown>[]; on_demand: unknown } })
      .automation;
    expect(auto.policies[0]).toEqual({
      subjects: [`*.site.${D}`, `*.code.${D}`],
      issuers: [
        {
          module: "acme",
          email: "ops@x.test",
          challenges: { dns: { provider: { name: "cloudflare", api_token: "cf-token" } } },
        },
      ],
    });
    expect(auto.policies[1]).toMatchObject({ on_demand: true });
    expect(auto.on_demand).toEqual({ ask: "http://127.0.0.1:8090/tls/ask" });
    expect(t.listen).toEqual([":443"]);
  });

  it("without a token: on-demand only, and the wildcard hosts are not managed up front", () => {
    const t = tlsConfig({ ...base, tls: { mode: "https" } });
    expect(t.automaticHttps).toEqual({ skip_certificates: [`*.site.${D}`, `*.code.${D}`] });
    expect(t.tls).toEqual({
      automation: {
        policies: [{ on_demand: true, issuers: [{ module: "acme" }] }],
        on_demand: { ask: "http://127.0.0.1:8090/tls/ask" },
      },
    });
  });

  it("the whole config is deterministic (same options → same JSON, so the keeper never reloads needlessly)", () => {
    const opts = { ...base, tls: { mode: "https" as const } };
    expect(canonicalJson(buildEdgeConfig(opts))).toBe(canonicalJson(buildEdgeConfig(opts)));
    expect(JSON.stringify(buildEdgeConfig(opts))).not.toContain("undefined");
  });
});

const caddy = findCaddy();
if (!caddy) console.warn("SKIPPING `caddy validate` checks: `caddy` (2.6.2) is not on PATH");

describe.skipIf(!caddy)("generated configs against caddy 2.6.2 itself", () => {
  const run = promisify(execFile);
  const validate = async (config: unknown) => {
    const dir = await mkdtemp(join(tmpdir(), "doppio-validate-"));
    try {
      const file = join(dir, "c.json");
      await writeFile(file, JSON.stringify(config));
      const env = {
        ...process.env,
        HOME: dir,
        XDG_DATA_HOME: join(dir, "d"),
        XDG_CONFIG_HOME: join(dir, "c"),
      };
      await run("caddy", ["validate", "--config", file], { env });
      return "valid";
    } catch (err) {
      return String((err as { stderr?: string }).stderr ?? err);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  };

  it("local and on-demand configs validate", async () => {
    expect(
      await validate(buildEdgeConfig({ ...base, tls: { mode: "http", listen: "127.0.0.1:8080" } })),
    ).toBe("valid");
    expect(
      await validate(buildEdgeConfig({ ...base, tls: { mode: "https", acmeEmail: "ops@x.test" } })),
    ).toBe("valid");
  });

  it("the DNS-01 config fails ONLY for the Cloudflare module Debian's build lacks", async () => {
    const out = await validate(buildEdgeConfig({ ...base, tls: { mode: "https", cloudflareApiToken: "t" } }));
    expect(out).toContain("unknown module: dns.providers.cloudflare");
  });
});
