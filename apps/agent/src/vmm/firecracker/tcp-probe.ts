import { connect } from "node:net";
import { FirecrackerError } from "./errors.ts";
import type { ReadinessProbe } from "./golden.ts";
import type { Clock } from "./vm-launch.ts";

function tryConnect(host: string, port: number, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once("connect", () => done(true));
    socket.once("error", () => done(false));
  });
}

/** Ready means every port accepts a TCP connection; polled until the deadline. */
export class TcpReadinessProbe implements ReadinessProbe {
  constructor(
    private readonly clock: Clock,
    private readonly intervalMs = 250,
  ) {}

  async waitForPorts(
    ip: string,
    ports: number[],
    timeoutMs: number,
    alive?: () => Promise<boolean>,
  ): Promise<void> {
    const deadline = this.clock.now() + timeoutMs;
    const pending = new Set(ports);
    for (;;) {
      for (const port of [...pending]) {
        if (await tryConnect(ip, port, Math.min(2_000, timeoutMs))) pending.delete(port);
      }
      if (pending.size === 0) return;
      if (alive && !(await alive())) {
        throw new FirecrackerError(
          "vmm_exited",
          `${ip}: the VMM exited before port(s) ${[...pending].join(", ")} answered`,
        );
      }
      if (this.clock.now() >= deadline) {
        throw new FirecrackerError(
          "timeout",
          `${ip}: port(s) ${[...pending].join(", ")} not answering after ${timeoutMs} ms`,
        );
      }
      await this.clock.sleep(this.intervalMs);
    }
  }
}
