import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { CodedError } from "../src/coded-error.ts";
import { EdgeError } from "../src/edge/errors.ts";
import { AgentError } from "../src/errors.ts";
import { ImageError } from "../src/images/errors.ts";
import { CommandError } from "../src/net/command.ts";
import { NetworkError } from "../src/net/errors.ts";
import { FirecrackerError } from "../src/vmm/firecracker/errors.ts";
import { QemuError } from "../src/vmm/qemu/errors.ts";

const SRC = join(import.meta.dirname, "../src");

describe("one CodedError base for the agent's errors", () => {
  const cause = new Error("underneath");
  const errors = [
    new AgentError("ip_pool_exhausted", "no free address", { cause, details: { size: 4 } }),
    new EdgeError("caddy_rejected", "caddy said no", { cause, details: { status: 400 } }),
    new ImageError("build_failed", "recipe exited 1", { cause, details: { exit: 1 } }),
    new NetworkError("command_failed", "ip failed", { cause, details: { dev: "br0" } }),
    new QemuError("qmp_error", "QMP said no", { cause, details: { command: "cont" } }),
  ];

  it("gives each class its code, message, name, cause and details the same way", () => {
    expect(errors.map((e) => [e.name, e.code, e.message])).toEqual([
      ["AgentError", "ip_pool_exhausted", "no free address"],
      ["EdgeError", "caddy_rejected", "caddy said no"],
      ["ImageError", "build_failed", "recipe exited 1"],
      ["NetworkError", "command_failed", "ip failed"],
      ["QemuError", "qmp_error", "QMP said no"],
    ]);
    for (const e of errors) {
      expect(e).toBeInstanceOf(CodedError);
      expect(e.cause).toBe(cause);
      expect(Object.keys(e.details!)).toHaveLength(1);
    }
    expect(new AgentError("no_golden", "none").cause).toBeUndefined();
  });

  it("keeps Firecracker's API facts and a failed command's exit status next to the code", () => {
    const fc = new FirecrackerError("api_rejected", "PUT /actions: 400", {
      cause,
      status: 400,
      request: "PUT /actions",
      faultMessage: "bad action",
    });
    expect(fc).toBeInstanceOf(CodedError);
    expect(fc).toMatchObject({
      code: "api_rejected",
      status: 400,
      request: "PUT /actions",
      faultMessage: "bad action",
    });
    expect(fc.cause).toBe(cause);
    const cmd = new CommandError("ip", ["link", "show"], 1, "Cannot find device\n", cause);
    expect(cmd).toBeInstanceOf(CodedError);
    expect(cmd).toMatchObject({ code: "command_failed", exitCode: 1, stderr: "Cannot find device\n" });
    expect(cmd.message).toBe("ip link show failed (exit 1): Cannot find device");
  });

  it("has no agent error class outside it: only coded-error.ts extends Error", () => {
    const files = readdirSync(SRC, { recursive: true, encoding: "utf8" }).filter((f) => f.endsWith(".ts"));
    const direct = files.filter((f) => /\bextends Error\b/.test(readFileSync(join(SRC, f), "utf8")));
    expect(direct).toEqual(["coded-error.ts"]);
  });
});
