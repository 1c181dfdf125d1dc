import { describe, expect, it } from "vitest";
import { isValidIfName, macForIp, tapNameForIp } from "../../src/net/naming.ts";

describe("tapNameForIp", () => {
  it("is dbx plus the IPv4 in 8 hex digits", () => {
    expect(tapNameForIp("10.0.0.2")).toBe("dbx0a000002");
    expect(tapNameForIp("10.0.255.254")).toBe("dbx0a00fffe");
    expect(tapNameForIp("192.168.1.1")).toBe("dbxc0a80101");
  });

  it("fits the kernel's 15 characters and differs per IP", () => {
    const names = new Set<string>();
    for (let i = 0; i < 1024; i++) {
      const name = tapNameForIp(`10.0.${i >> 8}.${i & 255}`);
      expect(isValidIfName(name)).toBe(true);
      names.add(name);
    }
    expect(names.size).toBe(1024);
  });

  it("rejects what is not an IPv4 address", () => {
    expect(() => tapNameForIp("10.0.0")).toThrow();
    expect(() => tapNameForIp("10.0.0.256")).toThrow();
  });
});

describe("macForIp", () => {
  it("is locally administered unicast and carries the IP octets", () => {
    expect(macForIp("10.0.0.2")).toBe("06:00:0a:00:00:02");
    expect(macForIp("172.16.255.1")).toBe("06:00:ac:10:ff:01");
    const first = Number.parseInt(macForIp("10.1.2.3").slice(0, 2), 16);
    expect(first & 0b10).toBe(0b10);
    expect(first & 0b1).toBe(0);
  });

  it("is stable for one IP and distinct for two", () => {
    expect(macForIp("10.0.3.4")).toBe(macForIp("10.0.3.4"));
    expect(macForIp("10.0.3.4")).not.toBe(macForIp("10.0.4.3"));
  });
});

describe("isValidIfName", () => {
  it("enforces the kernel limits", () => {
    expect(isValidIfName("br-devbox")).toBe(true);
    expect(isValidIfName("a".repeat(16))).toBe(false);
    expect(isValidIfName("bad/name")).toBe(false);
    expect(isValidIfName("")).toBe(false);
  });
});
