import { createServer, type Server } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort } from "../../../api/test/support/ports.ts";
import { systemClock } from "../../src/vmm/firecracker/index.ts";
import { TcpReadinessProbe } from "../../src/vmm/firecracker/tcp-probe.ts";

describe("TcpReadinessProbe (loopback)", () => {
  let server: Server;
  let open: number;
  let closed: number;

  beforeAll(async () => {
    server = createServer((s) => s.end());
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
    open = (server.address() as { port: number }).port;
    closed = await freePort();
  });
  afterAll(async () => {
    await new Promise<void>((r) => server.close(() => r()));
  });

  it("resolves when every port accepts", async () => {
    await new TcpReadinessProbe(systemClock, 20).waitForPorts("127.0.0.1", [open], 2_000);
  });

  it("stops waiting as soon as the VMM is gone, long before the deadline", async () => {
    let asked = 0;
    const alive = async () => ++asked < 3;
    await expect(
      new TcpReadinessProbe(systemClock, 20).waitForPorts("127.0.0.1", [closed], 60_000, alive),
    ).rejects.toMatchObject({
      code: "vmm_exited",
      message: expect.stringContaining(`the VMM exited before port(s) ${closed} answered`),
    });
    expect(asked).toBe(3);
  });

  it("names the ports still closed at the deadline", async () => {
    await expect(
      new TcpReadinessProbe(systemClock, 20).waitForPorts("127.0.0.1", [open, closed], 200),
    ).rejects.toMatchObject({
      code: "timeout",
      message: expect.stringContaining(`port(s) ${closed} not answering`),
    });
  });
});
