import path from "node:path";
import { githubWebUrlProblem } from "@doppio/contracts";
import { describe, expect, it } from "vitest";
import { parseConfig } from "../../src/config.ts";
import { guestGitHubUrl } from "../../src/metadata/tokens.ts";
import { GUEST_LIB, run, which } from "./support.ts";

const CHECK = path.join(GUEST_LIB, "github-url");

/** Origins a box may be told GitHub lives at, and values that must never reach its shell or gitconfig. */
const GOOD = [
  "https://github.com",
  "https://ghe.example.com",
  "https://ghe.example.com:8443",
  "http://10.0.0.1:41234",
  "http://127.0.0.1:65535",
  `https://${"a".repeat(63)}.example.com`,
];
const BAD = [
  "",
  "github.com",
  "https://",
  "https://github.com/",
  "https://github.com/octo",
  "https://user@github.com",
  "https://user:pw@github.com",
  "https://github.com?x=1",
  "https://github.com#x",
  "https://GitHub.com",
  "https://github.com:0",
  "https://github.com:080",
  "https://github.com:65536",
  "https://github.com:",
  "https://github.com:1:2",
  "https://[::1]:8443",
  "https://.github.com",
  "https://github.com.",
  "https://git..hub.com",
  "https://-github.com",
  "https://github-.com",
  "ftp://github.com",
  "file:///etc/passwd",
  "https://github.com\nhost=evil.example",
  'https://x"]\n\thelper = !sh -c id #',
  "https://$(id).example.com",
  "https://`id`.example.com",
  "https://a b.com",
  "https://github.com;rm -rf /",
  "https://github.com'",
  `https://${"a".repeat(200)}.com`,
];

const shells = [
  ["sh", which("sh")],
  ["busybox sh", which("busybox")],
] as const;

describe("a box's GitHub web URL (contracts and the guest's github-url agree)", () => {
  it("contracts accept the good origins and refuse the rest", () => {
    for (const u of GOOD) expect(githubWebUrlProblem(u), u).toBeNull();
    for (const u of BAD) expect(githubWebUrlProblem(u), JSON.stringify(u)).not.toBeNull();
  });

  for (const [name, shell] of shells) {
    if (!shell) console.warn(`SKIPPING the guest's github-url under ${name}: not on PATH`);
    it.skipIf(!shell)(`the guest's check under ${name} says the same`, async () => {
      const args = name === "sh" ? [CHECK] : ["sh", CHECK];
      for (const u of [...GOOD, ...BAD]) {
        const r = await run(shell!, [...args, u], "", {});
        expect(r.code === 0, JSON.stringify(u)).toBe(githubWebUrlProblem(u) === null);
      }
    });
  }
});

describe("the GitHub URL a guest is given (guestGitHubUrl)", () => {
  const base = {
    controlPlaneUrl: "http://127.0.0.1:1",
    serverToken: "server-token-0123",
    dataDir: "/nonexistent",
    domain: "example.test",
    apiToken: "agent-api-token-0123456789",
  };
  const user = parseConfig({ ...base, networkMode: "user", userModeHostPorts: [41234] });

  it("a GitHub on a forwarded loopback port is reached at the guest's gateway (user mode)", () => {
    expect(guestGitHubUrl(user, "http://127.0.0.1:41234", "10.0.2.2")).toBe("http://10.0.2.2:41234");
    expect(guestGitHubUrl(user, "http://localhost:41234", "10.0.2.2")).toBe("http://10.0.2.2:41234");
  });

  it("any other GitHub is passed on as it is", () => {
    expect(guestGitHubUrl(user, "https://github.com", "10.0.2.2")).toBe("https://github.com");
    // A loopback port that is not forwarded: no host service is exposed to the guest.
    expect(guestGitHubUrl(user, "http://127.0.0.1:41235", "10.0.2.2")).toBe("http://127.0.0.1:41235");
    expect(guestGitHubUrl(user, "http://10.9.9.9:41234", "10.0.2.2")).toBe("http://10.9.9.9:41234");
    const tap = parseConfig({ ...base });
    expect(guestGitHubUrl(tap, "http://127.0.0.1:41234", "10.0.0.1")).toBe("http://127.0.0.1:41234");
  });

  it("host ports for guests are refused outside user mode", () => {
    expect(() => parseConfig({ ...base, userModeHostPorts: [41234] })).toThrow(/only with networkMode: user/);
    expect(() => parseConfig({ ...base, networkMode: "user", userModeHostPorts: [0] })).toThrow();
  });
});
