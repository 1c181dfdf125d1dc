import { readFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { describe, expect, it } from "vitest";
import { freePort } from "./support/ports.ts";

/** The test servers' ports (support/ports.ts): never where the kernel picks, never one in use. */
describe("freePort", () => {
  const ephemeralLow = Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").split(/\s+/)[0]);

  it("hands out distinct ports below the kernel's ephemeral range", async () => {
    const ports = await Promise.all(Array.from({ length: 50 }, () => freePort()));
    expect(new Set(ports).size).toBe(50);
    for (const port of ports) expect(port).toBeLessThan(ephemeralLow);
  });

  it("never hands out a port something listens on, even after going round its whole slice", async () => {
    const taken = await freePort();
    const server: Server = createServer();
    await new Promise<void>((resolve) => server.listen(taken, "127.0.0.1", resolve));
    try {
      const handed = new Set<number>();
      for (let i = 0; i < 1_000; i++) handed.add(await freePort());
      expect(handed.has(taken)).toBe(false);
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });
});
