import { randomBytes } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadConfig } from "../src/config.ts";
import { readGitHubSecrets } from "../src/github/config.ts";

/** The operator's GitHub App settings: YAML and environment, each secret inline or from a file. */
describe("GitHub App configuration", () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), "doppio-gh-config-"));
    await writeFile(
      path.join(dir, "key.pem"),
      "-----BEGIN RSA PRIVATE KEY-----\nabc\n-----END RSA PRIVATE KEY-----\n",
    );
    await writeFile(path.join(dir, "client-secret"), "from-a-file\n");
    await writeFile(
      path.join(dir, "api.yaml"),
      [
        "github:",
        "  appId: 12",
        "  appSlug: my-boxes",
        "  clientId: Iv23liX",
        `  privateKeyFile: ${path.join(dir, "key.pem")}`,
        `  clientSecretFile: ${path.join(dir, "client-secret")}`,
        "  webhookSecret: hook",
        `  secretsKey: ${randomBytes(32).toString("base64")}`,
        "  webUrl: https://ghe.example.com",
        "  apiUrl: https://ghe.example.com/api/v3",
      ].join("\n"),
    );
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("is off unless configured", () => {
    expect(loadConfig({}).github).toBeUndefined();
  });

  it("reads the YAML section, GHES base URLs, and secrets from files (trimmed)", () => {
    const config = loadConfig({ DOPPIO_API_CONFIG: path.join(dir, "api.yaml") });
    expect(config.github).toMatchObject({
      appId: 12,
      webUrl: "https://ghe.example.com",
      apiUrl: "https://ghe.example.com/api/v3",
    });
    const secrets = readGitHubSecrets(config.github!);
    expect(secrets.clientSecret).toBe("from-a-file");
    expect(secrets.privateKey).toContain("BEGIN RSA PRIVATE KEY");
    expect(secrets.webhookSecret).toBe("hook");
  });

  it("lets the environment override the file, and defaults to github.com", () => {
    const config = loadConfig({
      DOPPIO_API_CONFIG: path.join(dir, "api.yaml"),
      DOPPIO_GITHUB_APP_ID: "99",
      DOPPIO_GITHUB_WEBHOOK_SECRET: "from-env",
    });
    expect(config.github!.appId).toBe(99);
    expect(readGitHubSecrets(config.github!).webhookSecret).toBe("from-env");
    const fromEnv = loadConfig({
      DOPPIO_GITHUB_APP_ID: "1",
      DOPPIO_GITHUB_APP_SLUG: "x",
      DOPPIO_GITHUB_CLIENT_ID: "c",
      DOPPIO_GITHUB_CLIENT_SECRET: "s",
      DOPPIO_GITHUB_PRIVATE_KEY: "k",
      DOPPIO_GITHUB_WEBHOOK_SECRET: "w",
      DOPPIO_SECRETS_KEY: "a2V5",
    });
    expect(fromEnv.github).toMatchObject({ webUrl: "https://github.com", apiUrl: "https://api.github.com" });
  });

  it("takes GitHub's web URL as an origin (boxes trust it): normalised, anything else refused", () => {
    const env = {
      DOPPIO_GITHUB_APP_ID: "1",
      DOPPIO_GITHUB_APP_SLUG: "x",
      DOPPIO_GITHUB_CLIENT_ID: "c",
      DOPPIO_GITHUB_CLIENT_SECRET: "s",
      DOPPIO_GITHUB_PRIVATE_KEY: "k",
      DOPPIO_GITHUB_WEBHOOK_SECRET: "w",
      DOPPIO_SECRETS_KEY: "a2V5",
    };
    const web = (url: string) => loadConfig({ ...env, DOPPIO_GITHUB_WEB_URL: url }).github!.webUrl;
    expect(web("https://GHE.Example.com/")).toBe("https://ghe.example.com");
    expect(web("https://ghe.example.com:443")).toBe("https://ghe.example.com");
    expect(web("http://127.0.0.1:8080")).toBe("http://127.0.0.1:8080");
    for (const bad of [
      "https://ghe.example.com/github",
      "https://user:pw@ghe.example.com",
      "https://ghe.example.com/?x=1",
      "https://ghe.example.com/#x",
      "ftp://ghe.example.com",
      "https://[::1]",
      'https://ghe"x.example.com',
    ]) {
      expect(() => web(bad), bad).toThrow(/webUrl|GitHub's web URL/);
    }
  });

  it("refuses a secret given both inline and as a file, or not at all, without echoing it", () => {
    const both = () =>
      loadConfig({
        DOPPIO_API_CONFIG: path.join(dir, "api.yaml"),
        DOPPIO_GITHUB_CLIENT_SECRET: "inline-secret-value",
      });
    expect(both).toThrow(/exactly one of clientSecret or clientSecretFile/);
    try {
      both();
    } catch (err) {
      expect(String(err)).not.toContain("inline-secret-value");
    }
    expect(() => loadConfig({ DOPPIO_GITHUB_APP_ID: "1" })).toThrow(/invalid control-plane configuration/);
  });
});
