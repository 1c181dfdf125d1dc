import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";

/** Why netns tests cannot run here (not root, no iproute2), or null when they can. */
export function netnsUnavailable(): string | null {
  if (process.getuid?.() !== 0) return "not running as root";
  try {
    execFileSync("ip", ["-V"], { stdio: "ignore" });
    execFileSync("nft", ["--version"], { stdio: "ignore" });
  } catch {
    return "iproute2/nftables missing";
  }
  return null;
}

/**
 * A network namespace this test owns: created with a random name, loopback up, deleted
 * (with everything in it) by `destroy()`. All private-range traffic stays inside it.
 */
export class TestNetns {
  readonly name: string;

  private constructor(name: string) {
    this.name = name;
  }

  static create(prefix = "dbxt"): TestNetns {
    const name = `${prefix}-${randomBytes(4).toString("hex")}`;
    execFileSync("ip", ["netns", "add", name]);
    execFileSync("ip", ["-n", name, "link", "set", "lo", "up"]);
    return new TestNetns(name);
  }

  /** Runs a command inside the namespace and returns its stdout. */
  exec(file: string, args: string[], timeoutMs = 20_000): string {
    return execFileSync("ip", ["netns", "exec", this.name, file, ...args], {
      encoding: "utf8",
      timeout: timeoutMs,
    });
  }

  /** GET (or POST with `body`) from inside the namespace; the body of the answer, or throws. */
  curl(url: string, body?: string): string {
    const args = ["-sS", "--fail", "--max-time", "10"];
    if (body !== undefined) args.push("-X", "POST", "--data-binary", body);
    return this.exec("curl", [...args, url], 15_000);
  }

  destroy(): void {
    try {
      execFileSync("ip", ["netns", "del", this.name], { stdio: "ignore" });
    } catch {
      // already gone
    }
  }
}
