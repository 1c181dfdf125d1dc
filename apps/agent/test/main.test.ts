import { pino } from "pino";
import { describe, expect, it } from "vitest";
import { parseConfig } from "../src/config.ts";
import { createBackend } from "../src/main.ts";
import { LinuxHostNetwork } from "../src/net/host-network.ts";
import { QemuExecutor } from "../src/vmm/qemu/executor.ts";

const base = {
  controlPlaneUrl: "http://127.0.0.1:9",
  serverToken: "dpa_test_token",
  dataDir: "/tmp/doppio-main-test",
  domain: "example.test",
  apiToken: "x".repeat(32),
};
const log = pino({ level: "silent" });

describe("main.ts, the agent's wiring file", () => {
  it("builds the QEMU backend by default: user mode without a host network, tap mode on the config's bridge", async () => {
    const user = await createBackend(parseConfig({ ...base, networkMode: "user" }), log);
    expect(user.executor).toBeInstanceOf(QemuExecutor);
    expect(user.network).toBeNull();
    await user.executor.close();

    const tap = await createBackend(
      parseConfig({ ...base, bridge: { name: "br-test", cidr: "10.9.0.0/24" }, netns: "dbx-none" }),
      log,
    );
    expect(tap.executor.backend).toBe("qemu");
    expect(tap.network).toBeInstanceOf(LinuxHostNetwork);
    expect(tap.network).toMatchObject({ bridge: "br-test", gateway: "10.9.0.1", netns: "dbx-none" });
    await tap.executor.close();
  });

  it("has no test double in the production config: `backend: fake` and a `fake` section are refused", () => {
    expect(() => parseConfig({ ...base, backend: "fake" })).toThrow(/backend/);
    expect(() => parseConfig({ ...base, fake: { stepDelayMs: 1 } })).toThrow(/fake/);
  });
});
