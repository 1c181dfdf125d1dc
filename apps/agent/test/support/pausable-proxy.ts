import net from "node:net";

/**
 * A loopback TCP proxy that can make its target unreachable: pause() drops every open
 * connection and refuses new ones, the way a network outage looks to the agent.
 */
export class PausableProxy {
  readonly #server: net.Server;
  readonly #sockets = new Set<net.Socket>();
  #paused = false;

  private constructor(
    server: net.Server,
    readonly port: number,
  ) {
    this.#server = server;
  }

  static async start(target: { host: string; port: number }): Promise<PausableProxy> {
    let proxy: PausableProxy | null = null;
    const server = net.createServer((client) => {
      if (!proxy || proxy.#paused) {
        client.destroy();
        return;
      }
      const upstream = net.connect(target.port, target.host);
      proxy.#track(client);
      proxy.#track(upstream);
      client.pipe(upstream).pipe(client);
      const close = () => {
        client.destroy();
        upstream.destroy();
      };
      client.on("error", close).on("close", close);
      upstream.on("error", close).on("close", close);
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    proxy = new PausableProxy(server, (server.address() as net.AddressInfo).port);
    return proxy;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  pause(): void {
    this.#paused = true;
    for (const s of this.#sockets) s.destroy();
  }

  resume(): void {
    this.#paused = false;
  }

  async close(): Promise<void> {
    this.pause();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  #track(s: net.Socket): void {
    this.#sockets.add(s);
    s.on("close", () => this.#sockets.delete(s));
  }
}
