import { existsSync } from "node:fs";
import { pino } from "pino";
import { describe, expect, it } from "vitest";
import { parseConfig } from "../../src/config.ts";
import { createBackend } from "../../src/main.ts";

const base = {
  controlPlaneUrl: "http://127.0.0.1:9",
  serverToken: "dpa_test_token",
  dataDir: "/tmp/doppio-fc-backend-test",
  domain: "example.test",
  apiToken: "x".repeat(32),
};

describe("backend: firecracker is selectable in the agent config", () => {
  it("accepts it in the config", () => {
    expect(parseConfig({ ...base, backend: "firecracker" }).backend).toBe("firecracker");
  });

  // This host has no Firecracker (no package, no usable KVM): the agent must refuse to
  // start with every missing prerequisite named, not fail later on the first box.
  it.skipIf(existsSync("/usr/local/bin/firecracker"))(
    "refuses to start on a host without Firecracker, saying why",
    async () => {
      const config = parseConfig({ ...base, backend: "firecracker" });
      const attempt = createBackend(config, pino({ level: "silent" }));
      await expect(attempt).rejects.toThrow(/Firecracker host is not ready/);
      await expect(attempt).rejects.toThrow(/firecracker.*\/usr\/local\/bin\/firecracker/i);
    },
  );

  it("refuses user-mode networking", async () => {
    const config = parseConfig({ ...base, backend: "firecracker", networkMode: "user" });
    await expect(createBackend(config, pino({ level: "silent" }))).rejects.toThrow(/networkMode "tap"/);
  });
});
